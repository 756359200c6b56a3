"""`sbdlq apply POLICY.yaml`: DLQ hygiene rules as code (schema, actions, loader, plan, runner, report,
explain, lock)."""
