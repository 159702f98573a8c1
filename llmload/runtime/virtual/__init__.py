"""A whole run in one process and in virtual time: the real step controller, worker runtimes over an
in-process link (`link.py`), and a sender that the simulated engine answers (`engine.py`); `run.py` makes
and finalises the run directory (`llmload run CONFIG --virtual`). The target is never contacted."""
