"""The policy's serving side: the one sampling boundary (boundary.py), the in-process sampler
behind it, and a vLLM server rollforge manages or connects to (vllm_server.py, vllm_sampler.py).
Plain Python: no Prefect or Dask here (the flow decides when to start and stop an engine)."""
