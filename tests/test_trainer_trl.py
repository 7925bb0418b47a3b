"""TRL as installed from PyPI: GRPOTrainer's environment_factory driving envreg sandboxes: the tool
schemas transformers reads from the generated methods, the reset / tools / get_reward lifecycle, and a
two-step GRPO run on a tiny randomly initialised model and tokenizer built here (nothing downloaded)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from conftest import COUNTER, installed
from rollout_helpers import catalog_tasks

from envreg.env import load_environment
from envreg.manifest import build_manifest
from envreg.reward.truth import TruthCall
from envreg.rollout import Task, TaskTurn
from envreg.rollout.trl import environment_class, environment_factory, trl_dataset

# trl and transformers are imported by the tests, not at collection: each xdist worker collects every module
pytestmark = pytest.mark.skipif(
    not installed("trl"), reason="trl is not installed: scripts/bootstrap --trainers installs it"
)

PUBLIC = {"reset", "get_reward", "close"}


def _tools(cls) -> dict:
    return {
        name: fn
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in PUBLIC
    }


@pytest.mark.parametrize("env", ["calendar", "bank", "bfcl-travel-api"])
def test_transformers_reads_every_tool_schema_back(env: str) -> None:
    from transformers.utils import get_json_schema

    manifest = build_manifest(load_environment(env))
    tools = _tools(environment_class([env]))
    assert set(tools) == {t.name for t in manifest.tools}
    for spec in manifest.tools:
        schema = get_json_schema(tools[spec.name])["function"]  # what TRL puts in the chat template
        assert schema["name"] == spec.name
        params = schema["parameters"]
        assert set(params["properties"]) == set(spec.input_schema["properties"])
        assert set(params.get("required", [])) == set(spec.input_schema.get("required", []))
        for arg, prop in spec.input_schema["properties"].items():
            if "enum" in prop:
                assert params["properties"][arg]["enum"] == prop["enum"]


def test_reset_tools_and_reward_per_rollout() -> None:
    task = next(t for t in catalog_tasks("bank") if t.id == "bank/pay_new_payee_chain")
    factory = environment_factory([task])
    rows = trl_dataset([task]).to_list()
    a, b = factory(), factory()
    a.reset(**rows[0])
    b.reset(**rows[0])
    for call in task.turns[0].calls:
        getattr(a, call.tool)(**call.arguments)
    assert a.get_reward() == 1.0 and b.get_reward() < 0.5, "two rollouts, two sandboxes"
    first = task.turns[0].calls[0]
    before = getattr(b, first.tool)(**first.arguments)
    a.reset(**rows[0])  # the next rollout on the same instance starts from the task again
    assert getattr(a, first.tool)(**first.arguments) == before
    assert a.get_reward() < 1.0
    a.close()
    b.close()
    with pytest.raises(ValueError, match="no 'envreg_task' column"):
        a.reset(prompt=rows[0]["prompt"])


def test_one_factory_per_set_of_environments() -> None:
    with pytest.raises(ValueError, match="use environment_factories"):
        environment_factory(list(catalog_tasks("bank"))[:1] + list(catalog_tasks("calendar"))[:1])


# ---------------------------------------------------------------------------------- GRPO, 2 steps
def counter_task(i: int) -> Task:
    return Task(
        id=f"counter-{i}",
        envs=["counter"],
        initial_states={"counter": {"value": i}},
        turns=[
            TaskTurn(
                user=f"Add {i + 1} to the counter.",
                calls=[TruthCall(env="counter", tool="increment", arguments={"by": i + 1})],
            )
        ],
        final_states={"counter": {"value": 2 * i + 1}},
    )


def tiny_tokenizer(texts: list[str]):
    """A byte-level BPE tokenizer trained here on the prompts, with Qwen3's chat template (from TRL)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
               "<tool_response>", "</tool_response>", "<think>", "</think>"]  # fmt: skip
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=600, min_frequency=1, special_tokens=special)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=special[1:],
    )  # fmt: skip
    import trl

    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer.padding_side = "left"
    return tokenizer


@pytest.mark.slow
def test_two_grpo_steps_on_a_tiny_random_model(tmp_path) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.utils import get_json_schema
    from trl import GRPOConfig, GRPOTrainer

    tasks = [counter_task(i) for i in range(4)]
    factory = environment_factory(tasks, sources={"counter": COUNTER})
    dataset = trl_dataset(tasks)
    schemas = [get_json_schema(fn) for fn in _tools(factory).values()]
    tokenizer = tiny_tokenizer([json.dumps(schemas), *(json.dumps(t.prompt()) for t in tasks)] * 4)
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = Qwen3ForCausalLM(config)  # randomly initialised
    rewards: list[float] = []
    resets: list[str] = []

    class Recorded(factory):  # what TRL does with each environment instance, observed
        def reset(self, **row):
            resets.append(json.loads(row["envreg_task"])["id"])
            return super().reset(**row)

        def get_reward(self):
            rewards.append(super().get_reward())
            return rewards[-1]

    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=8, learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
        use_cpu=True, bf16=False, seed=0, max_tool_calling_iterations=1,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=Recorded,
    )
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(resets) == 8 and set(resets) <= {t.id for t in tasks}, "one reset per rollout, 2 steps x 4"
    # a random model writes no tool call in 8 tokens: every rollout left its counter untouched, which
    # envreg's reward scores 0 (the state the task asks for was not reached, the call not made)
    assert rewards == [0.0] * 8
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all("loss" in h and h["rewards/Recorded/mean"] == 0.0 for h in logged)
