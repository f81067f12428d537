"""The OTLP receiver: engines' per-request spans (vLLM's and SGLang's ``llm_request``), judged
against the latency objectives and counted, never stored as spans."""
