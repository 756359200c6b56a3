"""`sbdlq apply POLICY.yaml`: DLQ hygiene rules as code (schema, loader, plan, runner, explain, lock)."""
