"""The run's session lives on the Locust environment: the shape and the users reach it there, two
environments in one process never share one, and the run's named states change in one place."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from llmload.config import parse_config
from llmload.errors import LLMLoadError
from llmload.runtime.locustglue import session as session_mod
from llmload.runtime.master.states import ControllerState, RunState
from llmload.statemachine import StateMachine

CONFIG = {"target": {"url": "http://127.0.0.1:9", "api": "openai-chat"}, "client": {"max_concurrency": 8},
          "shape": {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}}}


class _StandIn:  # stand-ins for the locustfile's users (importing Locust here would patch too late)
    def build_request(self, arrival):
        return arrival.default_request()


class OpenAIChatUser(_StandIn):
    api = "openai-chat"


class OpenAICompletionsUser(_StandIn):
    api = "openai-completions"


class OllamaChatUser(_StandIn):
    api = "ollama-chat"


def _env(user_classes=(OpenAIChatUser, OpenAICompletionsUser, OllamaChatUser)):
    return SimpleNamespace(runner=None, user_classes=list(user_classes), parsed_options=None)


class _Shape:
    """`shapes.llm.LLMShape`'s tick and reset_time, run in a subprocess (it imports Locust)."""

    def __init__(self, env) -> None:
        self.env = env

    def tick(self):
        return self.env.llmload_session.tick(None) if hasattr(self.env, "llmload_session") else None

    def reset_time(self) -> None:
        self.env.llmload_session.new_shape_run()


_shape = _Shape

_SHAPE_SCRIPT = """
import json
from types import SimpleNamespace
import locust
from llmload.config import parse_config
from llmload.runtime.locustglue import session
from locustfiles.llm import LLMUser
from shapes.llm import LLMShape

class OllamaChatUser(LLMUser):
    api = "ollama-chat"

def shape_of(env):
    shape = LLMShape()
    shape.runner = SimpleNamespace(environment=env)
    return shape

env = SimpleNamespace(runner=None, user_classes=[LLMUser, OllamaChatUser], parsed_options=None)
before = shape_of(env).tick()
s = session.on_init(env)
s.config = parse_config(CONFIG)
users, rate, classes = shape_of(env).tick()
other = shape_of(SimpleNamespace(runner=None, user_classes=[LLMUser])).tick()
from llmload.apis import api_names
one = session.Session(SimpleNamespace(user_classes=[LLMUser], runner=None, parsed_options=None))
try:
    per_api = {n: [c.__name__ for c in one.user_classes(n)] for n in api_names()}
except Exception as exc:  # noqa: BLE001  (said to the test that reads it, not to the others)
    per_api = repr(exc)
print(json.dumps({"ticks": [before, users, rate, [c.__name__ for c in classes], other], "per_api": per_api,
                  "abstract": LLMUser.abstract}))
"""


@pytest.fixture(scope="module")
def in_locust() -> dict:
    """What _SHAPE_SCRIPT saw in a process that imported Locust first (one for this module's tests: an
    interpreter with Locust is ~0.7 s of CPU)."""
    done = subprocess.run([sys.executable, "-c", f"CONFIG = {CONFIG!r}\n" + _SHAPE_SCRIPT], capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_locust_shape_ticks_through_its_environment(in_locust):
    assert in_locust["ticks"] == [None, 8, 8.0, ["LLMUser"], None]


def test_one_user_class_serves_every_api(in_locust):
    """The locustfile's one user class is the one the session picks for every API of the registry (it was
    tests/apis/test_api_registry.py's, in a Locust process of its own)."""
    from llmload.apis import api_names

    assert in_locust["per_api"] == {name: ["LLMUser"] for name in api_names()}
    assert in_locust["abstract"] is False


def test_each_environment_has_its_own_session():
    first, second = _env(), _env()
    a, b = session_mod.on_init(first), session_mod.on_init(second)
    assert a is not b
    assert session_mod.session_of(first) is a and first.llmload_session is a
    assert session_mod.current(second) is b and session_mod.session_of(second) is b
    assert session_mod.session_of(SimpleNamespace()) is None


def test_the_shape_ticks_through_the_environment():
    env = _env()
    shape = _shape(env)
    assert shape.tick() is None  # before the locustfile's init: no session, no pool
    session = session_mod.on_init(env)
    session.config = parse_config(CONFIG)
    assert shape.tick() == (8, 8.0, [OpenAIChatUser])
    other = _shape(_env())  # another environment's shape sees nothing of this run
    assert other.tick() is None


def test_a_user_subclass_is_chosen_over_the_class_it_extends():
    class MyChatUser(OpenAIChatUser):
        pass

    session = session_mod.Session(_env((OpenAIChatUser, MyChatUser, OllamaChatUser)))
    assert session.user_class("openai-chat") is MyChatUser
    assert session.user_class("ollama-chat") is OllamaChatUser

    class OtherChatUser(OpenAIChatUser):
        pass

    # two of a user's own classes share the pool (by Locust weight)
    assert session_mod.Session(_env((OpenAIChatUser, MyChatUser, OtherChatUser))).user_classes("openai-chat") == [
        MyChatUser, OtherChatUser]
    with pytest.raises(LLMLoadError, match="no user class for api 'ollama-generate'"):
        session.user_class("ollama-generate")


def test_a_new_shaped_run_after_a_finished_one_keeps_the_pool():
    env = _env()
    session = session_mod.on_init(env)
    session.config = parse_config(CONFIG)
    for state in (RunState.PREFLIGHT, RunState.RUNNING, RunState.FINALISING, RunState.DONE):
        session.life._to(state)
    assert session.finished and _shape(env).tick() is None
    _shape(env).reset_time()  # web UI: Start again
    assert session.state is RunState.IDLE and not session.finished
    assert _shape(env).tick() is not None


def test_an_unexpected_transition_is_refused_and_logged(caplog):
    machine = StateMachine(ControllerState.DONE, {ControllerState.DONE: set()}, name="steps")
    assert machine.to(ControllerState.RUNNING) is False
    assert machine.state is ControllerState.DONE
    assert "no transition DONE -> RUNNING" in caplog.text
