"""The chain view: the selected chain as a tree, from the client's request to the final result.

The chain's notes come first, under its headline: what the proxy did to the traffic (a fault, an
intercept's edit) is read before the messages it changed.

Built from `ui.timeline` (pure); each node's data is the sequence number of the message it opens
with Enter. Redrawn when the chain changes, with the cursor kept on the same message.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from proxy.flows.events import ChainStatus
from ui.messages import CopyRequested, MessageChosen
from ui.model import ChainEntry
from ui.render import answered_here, chain_headline, ended_status, node_label, note_labels
from ui.timeline import Node, build_timeline

NodeData = int | None


class Labels(NamedTuple):
    """What every node label of one chain needs from its headline."""

    bridged: bool
    start: float
    ended: ChainStatus | None
    whole: bool
    """Whether the view kept every message of the chain (else a missing answer may be one let go)."""
    unrelayed: bool
    """Whether the proxy answered the chain's request itself (the server never saw it)."""

    @classmethod
    def of(cls, entry: ChainEntry) -> Labels:
        """The labels' context for `entry` as the view holds it now."""
        summary = entry.summary
        return cls(
            summary.bridged, summary.started, ended_status(summary), entry.whole, answered_here(summary)
        )


def _seq_of(node: Node) -> NodeData:
    if node.message is not None:
        return node.message.seq
    if node.pair is not None:
        return node.pair.first.seq
    return None


class ChainTree(Tree[NodeData]):
    """The selected chain's timeline; Enter opens the message under the cursor."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Message", show=True),
        Binding("space", "toggle_node", "Fold", show=True),
        Binding("c", "copy(False)", "Copy JSON-RPC", show=False),
        Binding("C", "copy(True)", "Copy curl", show=True),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(Text("no chain selected", style="dim"), id=id)
        self.auto_expand = False
        self.chain_key: str | None = None
        self._version: tuple[int, str] | None = None

    def show(self, entry: ChainEntry | None) -> None:
        """Show `entry` (or nothing); a redraw of the same chain keeps the cursor's message."""
        if entry is None:
            self.chain_key = None
            self._version = None
            self.clear()
            self.root.set_label(Text("no chain selected", style="dim"))
            return
        version = (len(entry.messages), entry.summary.model_dump_json())
        if entry.key == self.chain_key and version == self._version:
            return
        keep = self.cursor_node.data if entry.key == self.chain_key and self.cursor_node else None
        self.chain_key = entry.key
        self._version = version
        self.clear()
        self.root.set_label(chain_headline(entry.summary))
        for note in note_labels(entry.summary):
            self.root.add_leaf(note, data=None)
        timeline = build_timeline(entry.summary, entry.messages)
        self._add(self.root, timeline, Labels.of(entry))
        self.root.expand_all()
        if keep is not None:
            self._move_to(keep)

    def _add(self, parent: TreeNode[NodeData], nodes: list[Node], labels: Labels) -> None:
        for node in nodes:
            label = node_label(
                node, labels.bridged, labels.start, labels.ended, labels.whole, labels.unrelayed
            )
            if node.children:
                branch = parent.add(label, data=_seq_of(node))
                self._add(branch, node.children, labels)
            else:
                parent.add_leaf(label, data=_seq_of(node))

    def _move_to(self, seq: int) -> None:
        pending = list(self.root.children)
        while pending:
            node = pending.pop(0)
            if node.data == seq:
                self.move_cursor(node)
                return
            pending[:0] = node.children

    def action_copy(self, curl: bool) -> None:
        """Copy the message under the cursor (a pair copies its request) as curl or as JSON-RPC."""
        node = self.cursor_node
        if self.chain_key is not None and node is not None and node.data is not None:
            self.post_message(CopyRequested(self.chain_key, node.data, curl=curl))

    def on_tree_node_selected(self, event: Tree.NodeSelected[NodeData]) -> None:
        """Enter on a node: open its message (a pair opens with its request)."""
        event.stop()
        if self.chain_key is not None and event.node.data is not None:
            self.post_message(MessageChosen(self.chain_key, event.node.data))
