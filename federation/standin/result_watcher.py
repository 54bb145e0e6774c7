"""The SDK's own result watcher, fed in-process instead of by the AMQP result stream.

:class:`InProcessResultWatcher` is ``globus_compute_sdk``'s ``_ResultWatcher`` with its pika
loop replaced by an event the stand-in service sets when a result arrives, so futures
complete (and ``add_done_callback`` fires) within milliseconds, without anyone polling.
"""

from __future__ import annotations

import logging
import threading
import time

from globus_compute_common.messagepack.message_types import Result
from globus_compute_sdk.sdk import executor as sdk_executor
from globus_compute_sdk.sdk.executor import _ResultWatcher
from pika.spec import BasicProperties

logger = logging.getLogger(__name__)


class InProcessResultWatcher(_ResultWatcher):  # type: ignore[misc]
    """The SDK's result watcher, fed by the service instead of an AMQP consumer."""

    def run(self) -> None:
        self._thread_id = threading.get_ident()
        while not self._time_to_stop:
            if self._time_to_check_results.wait(timeout=self.poll_period_s):
                self._time_to_check_results.clear()
                with self._new_futures_lock:  # cancelled meanwhile (e.g. executor shutdown)
                    for tid in [t for t, f in self._open_futures.items() if f.done()]:
                        del self._open_futures[tid]
                        self._received_results.pop(tid, None)
                try:
                    self._match_results_to_futures()
                except Exception:  # one bad future must not stop every later delivery
                    logger.exception("result watcher: matching results failed")
        with self._new_futures_lock:
            while self._open_futures:
                _, fut = self._open_futures.popitem()
                if not fut.done():
                    fut.set_exception(RuntimeError("result watcher stopped"))
            self._open_futures_empty.set()
        self.unregister()

    def unregister(self) -> None:
        """Leave the SDK's per-task-group registry, which ``Executor.reload_tasks`` reads
        (it skips tasks a registered watcher still holds): a stopped watcher of a closed
        coordinator must not hide its tasks from the next coordinator in this process."""
        if sdk_executor._RESULT_WATCHERS.get(self.task_group_id) is self:
            sdk_executor._RESULT_WATCHERS.pop(self.task_group_id, None)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if threading.get_ident() == self._thread_id:
            self._time_to_stop = True
            return
        super().shutdown(wait=wait, cancel_futures=cancel_futures)

    def deliver(self, result: Result) -> None:
        props = BasicProperties(headers={}, timestamp=int(time.time()))
        with self._new_futures_lock:
            self._received_results[str(result.task_id)] = (props, result)
        self._time_to_check_results.set()
