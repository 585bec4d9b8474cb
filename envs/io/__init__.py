"""Kind `io`: write a Python function, graded by hidden input/output tests. The kind:
envs/io/env.py; its tasks, the procedural suite (seeded, split by content, difficulty levels):
envs/io/procedural.py over the families of envs/io/families/ (the original eight, the newer
leveled ones, the verification-only ones without a reference, and the edge-case families the
agent kind plays); the verifier: envs/io/grading.py, running the in-sandbox harness
envs/io/harness.py (also the `dataframe` kind's, by its `frames:` mode). Its hack suite is the
single-function kinds' shared one, envs/function_hacks.py."""
from envs.io.env import FunctionsEnv, ProceduralOptions

__all__ = ["FunctionsEnv", "ProceduralOptions"]
