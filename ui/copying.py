"""What `c` and `C` copy: a message as its JSON-RPC, or its request as a curl command.

Pure (no Textual): the view model and a message in, the text and a title out, so the wording and the
choice of proxy address are tested without an app. With several proxies in one view (the demo, a
merged feed) the command goes to the proxy whose listen address the request's `Host` header named.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.flows.events import MessageRecord, ProxyInfo
from proxy.record.curl import NoRequest, curl_command, request_for
from ui.model import ChainEntry, ViewModel
from ui.render import full_json


@dataclass(frozen=True, slots=True)
class Copy:
    """Text for the clipboard and a title saying what it is (or why there is nothing to copy)."""

    title: str
    text: str


def _proxy_for(model: ViewModel, request: MessageRecord) -> ProxyInfo | None:
    proxies = list(model.proxies.values())
    if len(proxies) > 1 and request.http is not None:
        host = next((v for k, v in request.http.headers.items() if k.lower() == "host"), None)
        for info in proxies:
            if host and info.listen.split("://")[-1].rstrip("/") == host:
                return info
    return model.info


def _session_opener(model: ViewModel, entry: ChainEntry) -> str | None:
    """The chain in view whose `initialize` opened `entry`'s session, if any."""
    session = entry.summary.session
    if not session:
        return None
    for chain in model.chains.values():
        if chain.summary.session == session and chain.summary.method == "initialize":
            return chain.summary.id
    return None


def as_curl(model: ViewModel, entry: ChainEntry, record: MessageRecord) -> Copy:
    """The curl command of `record`'s request (the request itself, or the one whose exchange carried it)."""
    try:
        request = request_for(entry.messages, record)
        info = _proxy_for(model, request)
        text = curl_command(
            entry.messages,
            record,
            chain_id=entry.summary.id,
            proxy_url=info.listen if info else None,
            upstream_url=info.upstream if info else None,
            session_opener=_session_opener(model, entry),
        )
    except NoRequest as exc:
        return Copy(f"nothing to copy as curl: {exc}", "")
    return Copy(f"copied as curl: message {request.seq} of chain {entry.summary.id}", text)


def as_jsonrpc(entry: ChainEntry, record: MessageRecord) -> Copy:
    """The message's JSON-RPC body, indented."""
    text = full_json(record.body)
    if not text:
        return Copy(f"nothing to copy: message {record.seq} has no body", "")
    return Copy(f"copied as JSON-RPC: message {record.seq} of chain {entry.summary.id}", text)
