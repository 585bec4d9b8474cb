"""rollforge-regex: a worked example of a rollforge environment plug-in. The policy writes a
regular expression; the sandbox matches it. The entry point `regex` (pyproject.toml) names
`RegexEnv` below."""
from rollforge_regex.env import RegexEnv, RegexOptions, RegexPayload, pattern_of

__all__ = ["RegexEnv", "RegexOptions", "RegexPayload", "pattern_of"]
