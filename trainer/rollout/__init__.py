"""The trainer's rollout wing: row -> task -> episode -> sample -> group (docs/trainer-rollout.md)."""
