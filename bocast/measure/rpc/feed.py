"""An open batch of the RPC runner (a *feed*,
:meth:`~bocast.measure.rpc.runner.RpcRunner.open_feed`): configurations are put in while it runs,
the servers build and time them as one queue, and each answer is delivered as it comes, once. It is
how the pipelined loop (:mod:`bocast.run.pipeline`) keeps every server's build workers busy across
its batches: the next batch's kernels are queued while the last ones of this batch are still
building, so no batch waits for its slowest kernel. Everything else is the batch's: a lost or hung
server's kernels go back to the queue, each kernel is answered once, a session holds one server
(``bocast.measure.rpc.batch``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from bocast.measure.rpc.batch import _Batch, _Call, built_and_ran, measured_on
from bocast.space.knobs import Config


class Feed:
    """``calls(configs)`` makes the build tasks; ``run(batch, deliver)`` serves the open batch
    until it is closed and drained (the runner's scheduler, in a thread of the feed's own);
    ``on_result(i, build, run)`` is told each answer, ``i`` the configuration's place among
    everything put so far; ``reference`` is the worker's task that times the reference."""

    def __init__(self, calls: Callable[[Sequence[Config]], list[_Call]],
                 run: Callable[[_Batch, Callable[[int, dict | None, dict], None]], None],
                 on_result: Callable[..., None], reference: dict[str, Any]):
        self._calls, self.on_result = calls, on_result
        self.batch = _Batch([], builds=True)
        self.batch.open = True
        self.error: BaseException | None = None
        self.reference = reference
        self.direct: dict[int, Callable[[dict[str, Any]], None]] = {}  # id(call) -> its taker
        self._thread = threading.Thread(target=self._serve, args=(run,), daemon=True,
                                        name="rpc-feed")
        self._thread.start()

    def put(self, configs: Sequence[Config]) -> list[int]:
        """Queue ``configs``; their indices (``on_result``'s ``i``)."""
        if self.error is not None:
            raise self.error
        return self.batch.add(self._calls(configs))

    def put_reference(self, on_answer: Callable[[dict[str, Any]], None]) -> None:
        """Queue a timing of the reference, run by the session that takes it beside its
        server's builds (after the kernels queued before it); ``on_answer(answer)``."""
        call = _Call(dict(self.reference), b"", 120.0, direct=True)
        self.direct[id(call)] = on_answer
        self.batch.add([call])

    def _serve(self, run) -> None:
        def deliver(i: int, info: dict[str, Any] | None, raw: dict[str, Any]) -> None:
            call = self.batch.calls[i]
            if call.direct:
                self.direct.pop(id(call))(raw)
                return
            b, r = built_and_ran(self.batch.calls[i].task["key"], raw)
            if r is not None and info is not None:
                r.extra["measured_on"] = measured_on(info)
            self.on_result(i, b, r)

        try:
            run(self.batch, deliver)
        except BaseException as e:  # noqa: BLE001 - the loop raises it (RpcUnavailable)
            self.error = e

    def close(self, *, wait: bool = True) -> None:
        """No more configurations; ``wait``: until every one put is answered (else the rest
        are dropped, as a batch cut short: not recorded, a resumed run measures them)."""
        if not wait:
            self.batch.finished.set()
        self.batch.close()
        self._thread.join()
        if wait and self.error is not None:
            raise self.error
