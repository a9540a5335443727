"""The experience model: format, reasoning annotation, the Lightning module, the synthetic env, the judge."""
