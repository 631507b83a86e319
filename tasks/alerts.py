"""Alert stage: a run's decisions open, count or check alerts; the outbox is sent through a Prefect webhook
block. Neither ever fails the run: what it could not do is logged, and a pending notification waits in the
outbox for the next run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import duckdb
import httpx
from prefect import get_run_logger, task

from specwatch.alerts import outbox
from specwatch.alerts.decided import Decided
from specwatch.alerts.opening import AlertChange, record_run
from specwatch.redact import redact_urls
from specwatch.store.db import DatabaseError


@task(name="record_alerts")
def record_alerts(db_path: Path, decided: list[Decided]) -> list[AlertChange]:
    logger = get_run_logger()
    try:
        changes = record_run(db_path, decided)
    except (DatabaseError, duckdb.Error) as exc:  # a full or read-only disk: the run stands without its alerts
        logger.warning("alerts not recorded: %s", exc)
        return []
    for c in changes:
        logger.info("alert #%d %s: %s", c.alert_id, c.event, c.text)
    return changes


@task(name="enqueue_hint")
def enqueue_hint(db_path: Path, message: str, run_id: str) -> None:
    try:
        outbox.enqueue_run(db_path, "hint", message, run_id)
    except DatabaseError as exc:
        get_run_logger().warning("regression hint not queued for notification: %s", exc)


def _block_target(block: str, fmt: str) -> outbox.Target:
    """The Prefect webhook block as a target: its method, URL and headers stay in the block (secrets).

    Sent as Webhook.call sends, one request per notification; call() itself shares one client that closes
    with the event loop of its first call, so a second notification could not go through it."""
    from prefect.blocks.webhook import Webhook
    from prefect.utilities.urls import validate_restricted_url

    hook = cast(Webhook, Webhook.load(block))  # a sync context: load returns the block itself
    url = hook.url.get_secret_value()
    if not hook.allow_private_urls:
        validate_restricted_url(url)

    def send(payload: dict[str, Any]) -> None:
        httpx.request(hook.method, url, json=payload, headers=hook.headers.get_secret_value(),
                      timeout=10.0).raise_for_status()

    return outbox.Target(f"block {block}", outbox.check_format(fmt), send)


@task(name="deliver_notifications")
def deliver_notifications(db_path: Path, block: str, fmt: str = "slack") -> outbox.Delivery | None:
    logger = get_run_logger()
    try:
        delivery = outbox.deliver(db_path, _block_target(block, fmt))
    except Exception as exc:  # a missing block or a locked database: the outbox keeps them for the next run
        logger.warning("notifications not sent through block %r (kept in the outbox): %s", block, redact_urls(str(exc)))
        return None
    for line in delivery.errors:
        logger.warning("%s (kept in the outbox for the next run)", line)
    if delivery.sent:
        logger.info("%d notification(s) sent through block %r", delivery.sent, block)
    return delivery
