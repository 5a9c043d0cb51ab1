"""What the soak test accepts as an answer: valid UTF-8 JSON, OpenAI-style error objects with the right
status (and param or code), completions plain or streamed that end as they should."""
import json

from raw_http import ProtocolError, sse_events


class Unexpected(Exception):
    """The server answered, but not as it should."""


def utf8_json(data, what="body"):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unexpected("%s is not valid UTF-8: %s" % (what, e))
    try:
        return json.loads(text)
    except ValueError as e:
        raise Unexpected("%s is not JSON (%s): %r" % (what, e, text[:120]))


def expect_error(res, statuses, param=None, code=None):
    """An OpenAI-style error object with one of `statuses`."""
    if res.status not in statuses:
        raise Unexpected("status %d, wanted %s: %r" % (res.status, "/".join(map(str, statuses)), res.body[:160]))
    if not res.headers.get("content-type", "").startswith("application/json"):
        raise Unexpected("error %d with content type %r" % (res.status, res.headers.get("content-type")))
    err = utf8_json(res.body, "error body").get("error")
    if not isinstance(err, dict) or not all(k in err for k in ("message", "type", "param", "code")):
        raise Unexpected("status %d without an error object: %r" % (res.status, res.body[:160]))
    if not isinstance(err["message"], str) or not err["message"]:
        raise Unexpected("error %d with an empty message" % res.status)
    if param is not None and err["param"] != param:
        raise Unexpected("error %d names param %r, wanted %r (%s)" % (res.status, err["param"], param, err["message"]))
    if code is not None and err["code"] != code:
        raise Unexpected("error %d has code %r, wanted %r" % (res.status, err["code"], code))
    return str(res.status)


def check_generation(res, chat, stream):
    """200 with a completion (plain or streamed, ending in [DONE]), or 503 when the queue is full."""
    if res.status == 503:
        return expect_error(res, (503,))
    if res.status != 200:
        raise Unexpected("generation answered %d: %r" % (res.status, res.body[:200]))
    if stream:
        if not res.headers.get("content-type", "").startswith("text/event-stream"):
            raise Unexpected("stream with content type %r" % res.headers.get("content-type"))
        try:
            events = sse_events(res.body)
        except UnicodeDecodeError as e:
            raise Unexpected("stream is not valid UTF-8: %s" % e)
        except ProtocolError as e:
            raise Unexpected(str(e))
        if not events or events[-1] != "[DONE]":
            raise Unexpected("stream does not end with [DONE]")
        want = "chat.completion.chunk" if chat else "text_completion"
        for e in events[:-1]:
            obj = utf8_json(e.encode(), "event")
            if "error" in obj:
                raise Unexpected("stream carried an error: %r" % e[:160])
            if obj.get("object") != want:
                raise Unexpected("event object %r, wanted %r" % (obj.get("object"), want))
        return "200"
    body = utf8_json(res.body)
    want = "chat.completion" if chat else "text_completion"
    if body.get("object") != want or not body.get("choices"):
        raise Unexpected("completion object %r: %r" % (body.get("object"), res.body[:160]))
    return "200"
