"""`envreg validate`: the conformance gate for environment images.

Named checks run against real containers of an image, each reporting pass / fail / skip with its evidence.
The groups, in report order: manifest, schemas, scenarios, state, sandbox, budgets (one module each).

```python
from envreg.validate import validate

reports = await validate(["calendar", "images/bank"])
assert all(r.passed for r in reports)
```
"""

from envreg.validate import budgets as _budgets  # noqa: F401  (registers the checks, in report order)
from envreg.validate import manifest as _manifest  # noqa: F401
from envreg.validate import sandbox as _sandbox  # noqa: F401
from envreg.validate import scenarios as _scenarios  # noqa: F401
from envreg.validate import schemas as _schemas  # noqa: F401
from envreg.validate import state as _state  # noqa: F401
from envreg.validate.core import CHECKS, Check, CheckResult, EnvReport, Outcome, Status, select
from envreg.validate.runner import validate

__all__ = ["CHECKS", "Check", "CheckResult", "EnvReport", "Outcome", "Status", "select", "validate"]
