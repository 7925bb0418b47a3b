"""The stand-in model as users run it: `python -m envreg.standin` in its own process, spoken to with the
`openai` SDK; its scripts follow the task's oracle."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rollout_helpers import catalog_tasks

from envreg.standin import SCRIPTS, Scripted, StandInLLM
from envreg.standin.scripts import UNKNOWN


@pytest.fixture
def served():
    proc = subprocess.Popen(
        [sys.executable, "-m", "envreg.standin", "--env", "bank", "--script", "oracle", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert "stand-in model 'standin' (oracle, 8 tasks) at http://127.0.0.1:" in line, proc.stderr.read()
    yield line.rsplit(" ", 1)[1].strip()
    proc.terminate()
    proc.wait(timeout=10)


def test_the_module_serves_the_oracle_over_http(served) -> None:
    OpenAI = pytest.importorskip("openai", reason="the openai SDK comes with envreg's synth extra").OpenAI

    task = catalog_tasks("bank")[0]
    client = OpenAI(base_url=served, api_key="x")
    messages = task.prompt()
    reply = client.chat.completions.create(model="standin", messages=messages)
    (call,) = reply.choices[0].message.tool_calls
    first = task.turns[0].calls[0]
    assert call.function.name == first.tool and json.loads(call.function.arguments) == first.arguments
    assert reply.choices[0].finish_reason == "tool_calls"
    stranger = client.chat.completions.create(model="standin", messages=[{"role": "user", "content": "hi"}])
    assert stranger.choices[0].message.content == UNKNOWN
    assert [m.id for m in client.models.list().data] == ["standin"]


def test_bad_arguments_are_refused_with_usage() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "envreg.standin", "--script", "genius"], capture_output=True, text=True
    )
    assert result.returncode == 2 and "invalid choice: 'genius'" in result.stderr
    result = subprocess.run([sys.executable, "-m", "envreg.standin"], capture_output=True, text=True)
    assert result.returncode == 2 and "hint: give --env NAME" in result.stderr


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_a_chat_completion(script: str) -> None:
    OpenAI = pytest.importorskip("openai", reason="the openai SDK comes with envreg's synth extra").OpenAI

    task = catalog_tasks("bank")[0]
    with StandInLLM(Scripted([task], script)) as llm:
        message = (
            OpenAI(base_url=llm.base_url, api_key="x")
            .chat.completions.create(model="standin", messages=task.prompt(), seed=1)
            .choices[0]
            .message
        )
    if script in ("oracle", "parallel", "bad", "malformed", "flaky"):
        assert message.tool_calls
        arguments = message.tool_calls[0].function.arguments
        if script == "malformed":
            with pytest.raises(ValueError):
                json.loads(arguments)
        elif script in ("bad", "flaky"):
            assert json.loads(arguments)["not_an_argument"] is True
    else:
        assert not message.tool_calls and message.content
    if script == "parallel":
        assert len(message.tool_calls) == len(task.turns[0].calls)


def test_unknown_script_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown script 'x'"):
        Scripted([], "x")
