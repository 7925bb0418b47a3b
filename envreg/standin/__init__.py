"""The stand-in model: an OpenAI-compatible server with scripted answers, for tests, bench and smoke tests.

```bash
python -m envreg.standin --env calendar --script oracle --port 8000     # serves http://127.0.0.1:8000/v1
envreg eval --base-url http://127.0.0.1:8000/v1 --model standin --env calendar
```

In Python, ``with StandInLLM(policy) as llm:`` serves any policy (a callable from the request body to
an assistant message: `text(...)`, `tool_calls(...)`); `Scripted(tasks, script)` is the policy that
plays tasks (see `envreg.standin.scripts`).
"""

from envreg.standin.scripts import SCRIPTS, Scripted
from envreg.standin.server import Policy, StandInLLM, completion, fake_embedding, text, tool_calls

__all__ = [
    "SCRIPTS",
    "Policy",
    "Scripted",
    "StandInLLM",
    "completion",
    "fake_embedding",
    "text",
    "tool_calls",
]
