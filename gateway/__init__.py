"""An OpenAI-compatible gateway in front of a run's policy (gateway/README.md)."""
