"""The scheduled cycle: run the experiment (the A/B flow as a subflow), checking every point against its
baseline from history at the end of that run. A flagged run ends Failed("Regression") so the UI shows it,
and notifies through the outbox and a Prefect webhook block (tasks/alerts.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, cast

from prefect import flow, get_run_logger
from prefect.states import Completed, Failed, State
from pydantic import ValidationError

from flows.ab import ab
from specwatch.bisect.steps import FollowUpError, bisect_after
from specwatch.engine.ending import HistoryBaseline
from specwatch.resolve import load_spec
from specwatch.spec import ExperimentSpec, SpecError
from tasks.alerts import deliver_notifications, enqueue_hint

DEFAULT_BASELINE = HistoryBaseline()  # frozen by Prefect into the parameter schema, never mutated


def start_bisect(spec: ExperimentSpec, versions: list[str], deployment: str, db: str | None, cluster: str) -> str:
    """The bisect of a REVERT as a follow-up flow run of its own deployment (not waited for: it runs for hours).
    Its A/Bs take the cluster's lock like any run, so it waits while the host is busy."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment

    try:
        follow = bisect_after(spec, versions)
    except (FollowUpError, ValidationError) as exc:
        return f"no bisect: {' '.join(str(exc).split())}"
    # a sync flow: run_deployment returns the flow run itself
    run = cast(FlowRun, run_deployment(deployment, parameters={"spec": follow.model_dump(mode="json"), "db": db,
                                                               "cluster": cluster}, timeout=0))
    return f"bisect {follow.images[0].name} .. {follow.images[-1].name} started as flow run {run.id}"


@flow(name="specwatch-regression", log_prints=True)
def regression(
    experiment_file: str,
    baseline: HistoryBaseline = DEFAULT_BASELINE,
    cluster: str = "local",
    db: str | None = None,
    notify_block: str | None = None,
    notify_format: Literal["slack", "json"] = "slack",
    bisect_versions: list[str] | None = None,
    bisect_deployment: str = "specwatch-bisect/bisect-on-demand",
) -> State:
    """Nightly: run the experiment, compare with history, fail with a Regression state when flagged.

    Notifications (the A/B's alerts, and this run's regression hint) go to the outbox and are sent
    through the webhook block `notify_block`; what a down target did not take is sent by the next run.
    `bisect_versions`: the versions between an image-vs-image experiment's two images, oldest first; when its
    A/B is decided REVERT, the bisect over them starts as a follow-up run of `bisect_deployment`."""
    logger = get_run_logger()
    try:
        spec = load_spec(Path(experiment_file))
    except SpecError as exc:
        return Failed(message=f"invalid experiment file: {'; '.join(exc.problems)}")
    # the history checks run inside the A/B's end, before its one verdict and its one report
    outcome = ab(spec, db=db, experiment_file=str(Path(experiment_file).resolve()), cluster=cluster, history=baseline)
    if outcome.error:
        return Failed(message=outcome.error)
    flagged = outcome.history + ([outcome.headline] if outcome.exit_code == 3 else [])
    if outcome.decision == "REVERT" and bisect_versions:
        flagged.append(start_bisect(spec, bisect_versions, bisect_deployment, db, cluster))
    message = f"run {outcome.run_id} regressed: " + "; ".join(flagged[:5]) + \
        (f" (+{len(flagged) - 5} more)" if len(flagged) > 5 else "")
    if flagged:
        logger.error(message)
        # a hint, not an alert: the team hears of it as before, through the outbox
        enqueue_hint(outcome.db_path, message, outcome.run_id)
    if notify_block:
        deliver_notifications(outcome.db_path, notify_block, notify_format)
    if not flagged:
        return Completed(message=f"run {outcome.run_id}: {outcome.headline}; no regression against history",
                         data=outcome)
    return Failed(name="Regression", message=message, data=outcome)
