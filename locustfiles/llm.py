"""The Locust user for LLM servers (every API of `llmload.apis`: OpenAI, Ollama, SGLang), open loop.

Run it through `llmload run CONFIG.yaml`, or with Locust's own command line (always with the shape):

    locust -f locustfiles/llm.py,shapes/llm.py --headless --llmload-config run.yaml
    locust -f locustfiles/llm.py,shapes/llm.py --llmload-config run.yaml          # web UI, LLM tab
    locust -f locustfiles/llm.py,shapes/llm.py --headless --processes 2 --llmload-config run.yaml
    locust -f locustfiles/llm.py,shapes/llm.py --master --expect-workers 2 --headless --llmload-config run.yaml
    locust -f locustfiles/llm.py,shapes/llm.py --worker --master-host 10.0.0.5

Options: `--llmload-config PATH` (the run configuration: target, shape, SLO, ...), `--llmload-run-dir
DIR` (default: a new `<output>/<UTC time>-<shape>/`), `--llmload-skip-preflight`, `--llmload-rates`
/ `--llmload-slo` (this run's rates and SLO instead of the file's; the web UI's start form shows them)
and `--llmload-no-locust-stats` (`llmload run` passes it: its output ends with its own summary rather
than Locust's request tables, even with `--print-stats`). Our live step table replaces Locust's
statistics table under plain `locust -f` too (`llmload.runtime.locustglue.console.replace_locust_stats`);
`--print-stats` brings Locust's back.

One user class, `LLMUser`, for every `target.api`: the API (path, body, stream format) is the
`llmload.apis` spec that `target.api` names, read by the client library. Users never pace themselves: each one
blocks in `wait_time` on its worker's arrival queue (`llmload.runtime.worker.scheduler`) and sends the request
it takes. Each request writes its record to `records/worker-<id>.jsonl` and fires exactly one Locust
request event, `E2E` (type `LLM`, response time = E2E from `llmload.latency.latencies`, as the
analysis computes it, length = output tokens; failures carry the outcome, and one without a last
token its time until the connection closed), so Locust's RPS, statistics table and `/stats/requests` count each request once. TTFT and
TPOT are not Locust entries (Locust would add them to its totals): the LLM tab charts them per second
from the shipped summaries, and the run directory has them from the raw records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import locust  # noqa: F401  (first: it patches the standard library with gevent)
from locust import User, events, task

from llmload.apis import api_names, get_api
from llmload.latency import latencies
from llmload.records import Record
from llmload.runtime.locustglue import console, seams, session

if TYPE_CHECKING:  # the master never sends: it does not import the sending path
    from llmload.client.bodies import PreparedRequest
    from llmload.client.core import SendResult
    from llmload.client.spec import RequestSpec
    from llmload.runtime.worker.sending import PlannedArrival

__all__ = ["LLMUser"]


@events.init_command_line_parser.add_listener
def _options(parser, **kwargs) -> None:
    session.add_options(parser)
    parser.add_argument("--llmload-no-locust-stats", action="store_true", default=False, include_in_web_ui=False,
                        help="drop Locust's closing request tables (llmload run prints its own summary)")


@events.init.add_listener
def _init(environment, **kwargs) -> None:
    console.configure_logging()
    console.replace_locust_stats(environment.parsed_options)  # our step table, not Locust's every 2 s
    if getattr(environment.parsed_options, "llmload_no_locust_stats", False):
        console.drop_locust_stats()
    session.on_init(environment)


class LLMUser(User):
    """One slot of the client's concurrency: takes planned arrivals off the queue and streams them.

    Your own requests: subclass it in your locustfile and override `build_request` (what each planned
    arrival asks: messages, `max_tokens`, sampling and extra body fields, as a `RequestSpec`) and, for
    state that follows the answers (a multi-turn chat), `on_result`. The subclass takes the arrivals
    exactly as this class does, so timing, outcomes and records stay the runtime's. Run it with
    `llmload run CONFIG --locustfile yours.py` or `locust -f yours.py,shapes/llm.py --llmload-config
    CONFIG` (your file replaces this one: import `LLMUser` from `locustfiles.llm`); example:
    `examples/locustfiles/multiturn.py`.
    """

    #: the `target.api` this class speaks; empty: the run's `target.api` (see `spec`)
    api: str = ""
    #: Locust's name for the request entries
    request_type: str = "LLM"

    @property
    def spec(self):
        """The `llmload.apis.ApiSpec` this user speaks: `api`, else the run's `target.api`."""
        run = session.session_of(self.environment)
        return get_api(self.api or (run.config.target.api if run and run.config else "openai-chat"))

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self._job = None

    def wait_time(self) -> float:
        """Block until this worker's scheduler queues an arrival (Locust kills idle waiting users on stop)."""
        self._job = session.worker_of(self.environment).take()  # waits while the worker is being set up
        return 0.0

    def stop(self, force: bool = False) -> bool:
        """Locust stops a user to move it to a worker that joined mid-run (a rebalance): one with a
        request in flight finishes it first (`seams.finish_then_stop`), so a join never turns a request
        into `cancelled`. A stop of the test still kills it (the request is recorded `cancelled`)."""
        if seams.finish_then_stop(self):
            return False
        return super().stop(force)

    @task
    def send_planned_request(self) -> None:
        """Send the arrival taken in `wait_time` (the first run, before any wait, has none)."""
        job, self._job = self._job, None
        if job is not None:
            session.worker_of(self.environment).run(job, on_record=self._fire_events, user=self)

    def build_request(self, arrival: PlannedArrival) -> RequestSpec | PreparedRequest:
        """The request to send for `arrival` (a `llmload.runtime.worker.sending.PlannedArrival`: its request id,
        step, index, `scheduled_at`, planned `input_tokens` / `output_tokens`, a seeded `random`, `text(n)`
        and the run's `config`). Return a `llmload.client.spec.RequestSpec` (body built for `target.api`)
        or a `PreparedRequest` carrying `arrival.request_id`. The default is the config's request mix.

        It runs in the user's greenlet just before the arrival's time (as the mix did), so keep it fast:
        its time past the queue's few ms of lead shows as client wait. A sampled quality case
        (`quality.sample_under_load`) is sent instead of it. An exception here is recorded as a
        `client_error` for this arrival (nothing is sent) and the user goes on with the next one.
        """
        return arrival.default_request()

    build_request.default_mix = True  # not overridden: `requests.sessions` may take the arrivals

    def on_result(self, arrival: PlannedArrival, request: RequestSpec | PreparedRequest,
                  result: SendResult) -> None:
        """Called after the request `build_request` returned was answered (any outcome but
        `cancelled`): `result.record` is its record (outcome, counts), `result.text` the answer text
        (never stored). An exception here turns the request's record into a `client_error`."""

    def _fire_events(self, record: Record) -> None:
        """One Locust request event per request (E2E): TTFT and TPOT live in the LLM tab, not in Locust's totals."""
        ok = record.outcome == "ok"
        lat = latencies(record.sent_at, record.first_token_at, record.last_token_at, record.output_tokens)
        # a failure without a last token has no E2E: Locust's row gets its time until the connection
        # closed (an "elapsed", not an E2E); analysis never mixes the two
        elapsed = lat.e2e if lat.e2e is not None else latencies(record.sent_at, None, record.closed_at, 0).e2e
        error = None if ok else RuntimeError(record.error or f"{record.outcome} (HTTP {record.http_status})")
        self.environment.events.request.fire(
            request_type=self.request_type, name="E2E", response_time=(elapsed or 0.0) * 1000,
            response_length=record.output_tokens or 0, exception=error, context={"step": record.step})


session.register_user_classes({name: LLMUser for name in api_names()})
