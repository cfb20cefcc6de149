"""A fake OpenAI API on 127.0.0.1: the model, for agent frameworks pointed at it by `OPENAI_BASE_URL`.

It serves `POST /v1/chat/completions` and `POST /v1/responses` (non-streamed
and streamed), the two APIs the OpenAI Agents SDK and LangChain's ChatOpenAI
use, with the shapes of OpenAI's API reference, and records every request.

The model is a script: `fake.script(prompt, [[("get_balance", {})], [("pay_invoice", {...})]])`
makes a conversation whose first user message is `prompt` call those tools,
one round (an assistant turn with those tool calls) at a time; once every
scripted call has its output in the conversation, it answers
`FINAL: <tool>: <output> | …` — so the final text shows what the model saw.
A conversation without a script is answered `FINAL: (no tools)`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

FINAL_PREFIX = "FINAL: "


@dataclasses.dataclass(frozen=True)
class ModelCall:
    """One request the fake answered."""

    api: str  # "chat" or "responses"
    body: dict[str, Any]
    prompt: str  # the first user message
    tool_outputs: dict[str, str]  # call id -> what the model was given as that call's output


def call_id(round_: int, index: int) -> str:
    return f"call_{round_}_{index}"


class FakeOpenAI:
    def __init__(self) -> None:
        self.calls: list[ModelCall] = []
        self.scripts: dict[str, list[list[tuple[str, dict[str, Any]]]]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(_Handler):
            openai = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai", daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def base_url(self) -> str:
        """What to set as `OPENAI_BASE_URL`."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    # -- scripting and inspecting ------------------------------------------------

    def script(self, prompt: str, rounds: list[list[tuple[str, dict[str, Any]]]]) -> None:
        """The tool calls the model makes, round by round, in the conversation that starts with `prompt`."""
        with self._lock:
            self.scripts[prompt] = rounds

    def conversation(self, prompt: str) -> list[ModelCall]:
        with self._lock:
            return [c for c in self.calls if c.prompt == prompt]

    def outputs_seen(self, prompt: str) -> dict[str, str]:
        """tool name -> the output the model was given for it (the last request of the conversation)."""
        calls = self.conversation(prompt)
        if not calls:
            return {}
        rounds = self.scripts.get(prompt, [])
        names = {call_id(r, i): name for r, round_ in enumerate(rounds) for i, (name, _) in enumerate(round_)}
        return {names.get(cid, cid): output for cid, output in calls[-1].tool_outputs.items()}

    # -- the model -----------------------------------------------------------------

    def _decide(self, prompt: str, outputs: dict[str, str]) -> tuple[list[tuple[str, str, str]], str | None]:
        """(tool calls as (call id, name, JSON arguments), or the final text)."""
        rounds = self.scripts.get(prompt, [])
        for r, round_ in enumerate(rounds):
            ids = [call_id(r, i) for i in range(len(round_))]
            if not all(cid in outputs for cid in ids):
                return [(cid, name, json.dumps(args)) for cid, (name, args) in zip(ids, round_, strict=True)], None
        seen = [
            f"{name}: {outputs[call_id(r, i)]}" for r, round_ in enumerate(rounds) for i, (name, _) in enumerate(round_)
        ]
        return [], FINAL_PREFIX + (" | ".join(seen) if seen else "(no tools)")

    def answer(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        prompt, outputs = (_read_chat if api == "chat" else _read_responses)(body)
        with self._lock:
            self.calls.append(ModelCall(api=api, body=body, prompt=prompt, tool_outputs=outputs))
        tool_calls, text = self._decide(prompt, outputs)
        n = next(self._ids)
        model = body.get("model") or "gpt-test"
        if api == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
            if tool_calls:
                message["tool_calls"] = [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}
                    for cid, name, arguments in tool_calls
                ]
            return {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": "tool_calls" if tool_calls else "stop",
                    }
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
            }
        if tool_calls:
            output = [
                {
                    "type": "function_call",
                    "id": f"fc_{cid}",
                    "call_id": cid,
                    "name": name,
                    "arguments": arguments,
                    "status": "completed",
                }
                for cid, name, arguments in tool_calls
            ]
        else:
            output = [
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ]
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "temperature": 1.0,
            "top_p": 1.0,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": {
                "input_tokens": 20,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 30,
            },
        }


def _text(content: Any) -> str:
    """A message's or output's content as text (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


def _read_chat(body: dict[str, Any]) -> tuple[str, dict[str, str]]:
    messages = body.get("messages") or []
    prompt = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    outputs = {m["tool_call_id"]: _text(m.get("content")) for m in messages if m.get("role") == "tool"}
    return prompt, outputs


def _read_responses(body: dict[str, Any]) -> tuple[str, dict[str, str]]:
    items = body.get("input")
    if isinstance(items, str):
        return items, {}
    items = items or []
    prompt = next((_text(i.get("content")) for i in items if i.get("role") == "user"), "")
    outputs = {i["call_id"]: _text(i.get("output")) for i in items if i.get("type") == "function_call_output"}
    return prompt, outputs


def _chat_chunks(answer: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A chat completion as stream chunks."""
    message = answer["choices"][0]["message"]
    base = {
        "id": answer["id"],
        "object": "chat.completion.chunk",
        "created": answer["created"],
        "model": answer["model"],
    }
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    yield {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": answer["choices"][0]["finish_reason"]}]}
    yield {**base, "choices": [], "usage": answer["usage"]}


def _response_events(answer: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A response as Responses API stream events."""
    sequence = itertools.count()
    yield {
        "type": "response.created",
        "sequence_number": next(sequence),
        "response": {**answer, "status": "in_progress", "output": []},
    }
    for index, item in enumerate(answer["output"]):
        yield {
            "type": "response.output_item.added",
            "sequence_number": next(sequence),
            "output_index": index,
            "item": item,
        }
        yield {
            "type": "response.output_item.done",
            "sequence_number": next(sequence),
            "output_index": index,
            "item": item,
        }
    yield {"type": "response.completed", "sequence_number": next(sequence), "response": answer}


class _Handler(BaseHTTPRequestHandler):
    openai: FakeOpenAI

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.endswith("/chat/completions"):
            api = "chat"
        elif path.endswith("/responses"):
            api = "responses"
        else:
            self._json(404, {"error": {"message": f"no such endpoint {path}", "type": "invalid_request_error"}})
            return
        answer = self.openai.answer(api, body)
        if not body.get("stream"):
            self._json(200, answer)
            return
        events = _chat_chunks(answer) if api == "chat" else _response_events(answer)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in events:
            prefix = f"event: {event['type']}\n" if api == "responses" else ""
            self.wfile.write(f"{prefix}data: {json.dumps(event)}\n\n".encode())
        if api == "chat":
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _json(self, status: int, data: Any) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def fake_openai() -> Iterator[FakeOpenAI]:
    """One fake OpenAI API for the whole run (scripts are keyed by prompt, so tests do not collide)."""
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()
