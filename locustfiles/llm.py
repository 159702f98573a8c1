"""Locust users for LLM servers: OpenAI chat/completions and Ollama chat/generate, open loop.

Run it through `llmload run CONFIG.yaml`, or with Locust's own command line (always with the shape):

    locust -f locustfiles/llm.py,shapes/llm.py --headless --llmload-config run.yaml
    locust -f locustfiles/llm.py,shapes/llm.py --llmload-config run.yaml          # web UI, LLM tab
    locust -f locustfiles/llm.py,shapes/llm.py --headless --processes 2 --llmload-config run.yaml
    locust -f locustfiles/llm.py,shapes/llm.py --master --expect-workers 2 --headless --llmload-config run.yaml
    locust -f locustfiles/llm.py,shapes/llm.py --worker --master-host 10.0.0.5

Options: `--llmload-config PATH` (the run configuration: target, shape, SLO, ...), `--llmload-run-dir
DIR` (default: a new `<output>/<UTC time>-<shape>/`), `--llmload-skip-preflight`, and
`--llmload-no-locust-stats` (`llmload run` passes it: its output ends with its own summary rather
than Locust's request tables, where each request counts three times).

The user class is chosen by `target.api` (the shape names it). Users never pace themselves: each one
blocks in `wait_time` on its worker's arrival queue (`llmload.runtime.worker`) and sends the request
it takes. Each request writes its record to `records/worker-<id>.jsonl` and fires Locust request
events: `E2E` (type `LLM`, response time = E2E, length = output tokens; failures carry the outcome),
plus `TTFT` and `TPOT` entries whose "response time" is that metric. Locust adds those two entries to
its Aggregated row and total RPS (three events per request): read rates and percentiles from the LLM
tab or the run directory, whose numbers come from the raw records (Locust's buckets are rounded).
"""

import locust  # noqa: F401  (first: it patches the standard library with gevent)
from locust import User, events, task

from llmload.records import Record
from llmload.runtime import console, session

__all__ = ["LLMUser", "OllamaChatUser", "OllamaGenerateUser", "OpenAIChatUser", "OpenAICompletionsUser"]


@events.init_command_line_parser.add_listener
def _options(parser, **kwargs) -> None:
    session.add_options(parser)
    parser.add_argument("--llmload-no-locust-stats", action="store_true", default=False,
                        help="drop Locust's closing request tables (llmload run prints its own summary)")


@events.init.add_listener
def _init(environment, **kwargs) -> None:
    console.configure_logging()
    if getattr(environment.parsed_options, "llmload_no_locust_stats", False):
        console.drop_locust_stats()
    session.on_init(environment)


class LLMUser(User):
    """One slot of the client's concurrency: takes planned arrivals off the queue and streams them."""

    abstract = True
    #: the `target.api` this class speaks (the request body and stream format come from the client library)
    api: str = ""
    #: Locust's name for the request entries
    request_type: str = "LLM"

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self._job = None

    def wait_time(self) -> float:
        """Block until this worker's scheduler queues an arrival (Locust kills idle waiting users on stop)."""
        runtime = session.current().worker
        self._job = runtime.take()
        return 0.0

    @task
    def send_planned_request(self) -> None:
        """Send the arrival taken in `wait_time` (the first run, before any wait, has none)."""
        job, self._job = self._job, None
        if job is not None:
            session.current().worker.run(job, on_record=self._fire_events)

    def _fire_events(self, record: Record) -> None:
        fire = self.environment.events.request.fire
        ok = record.outcome == "ok"
        end = record.last_token_at or record.closed_at
        e2e_ms = (end - record.sent_at) * 1000 if end and record.sent_at else 0.0
        error = None if ok else RuntimeError(record.error or f"{record.outcome} (HTTP {record.http_status})")
        fire(request_type=self.request_type, name="E2E", response_time=e2e_ms,
             response_length=record.output_tokens or 0, exception=error, context={"step": record.step})
        if ok and record.first_token_at and record.sent_at:
            fire(request_type=self.request_type, name="TTFT",
                 response_time=(record.first_token_at - record.sent_at) * 1000, response_length=0,
                 exception=None, context={"step": record.step})
            if (record.output_tokens or 0) >= 2 and record.last_token_at:
                tpot_ms = (record.last_token_at - record.first_token_at) * 1000 / (record.output_tokens - 1)
                fire(request_type=self.request_type, name="TPOT", response_time=tpot_ms, response_length=0,
                     exception=None, context={"step": record.step})


class OpenAIChatUser(LLMUser):
    """`POST /v1/chat/completions` with `stream: true` (vLLM, llama.cpp, SGLang, any OpenAI-compatible)."""

    api = "openai-chat"


class OpenAICompletionsUser(LLMUser):
    """`POST /v1/completions` with `stream: true`."""

    api = "openai-completions"


class OllamaChatUser(LLMUser):
    """Ollama `POST /api/chat` (NDJSON stream)."""

    api = "ollama-chat"


class OllamaGenerateUser(LLMUser):
    """Ollama `POST /api/generate` (NDJSON stream)."""

    api = "ollama-generate"


session.register_user_classes({cls.api: cls for cls in
                               (OpenAIChatUser, OpenAICompletionsUser, OllamaChatUser, OllamaGenerateUser)})
