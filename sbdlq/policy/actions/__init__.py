"""The policy actions, one module each (`resubmit.py`, `purge.py`, `alert.py`), on the base in `base.py`.

`ACTIONS` is the one list of them, found here rather than written down: every module of this
package but `base` holds one action as `ACTION`, so a new action is one new file. The loader
(its keys, its refusals, its did-you-mean), the plan, the runner, the report, `--explain` and
`apply`'s confirmation all read it, in the actions' `order`.
"""

from __future__ import annotations

import importlib
import pkgutil

from sbdlq.policy.actions.base import PolicyAction

#: Modules of this package that hold no action.
NOT_ACTIONS = frozenset({"base"})


def _found() -> dict[str, PolicyAction]:
    """name → action, from each action module of this package, in the actions' `order`."""
    actions = []
    for module in pkgutil.iter_modules(__path__):
        if module.name not in NOT_ACTIONS:
            actions.append(importlib.import_module(f"{__name__}.{module.name}").ACTION)
    return {action.name: action for action in sorted(actions, key=lambda a: a.order)}


#: Every action a rule may take, by name.
ACTIONS: dict[str, PolicyAction] = _found()
