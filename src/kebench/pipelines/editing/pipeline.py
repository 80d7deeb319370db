"""editing pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.editing.nodes import (
    compute_edit_deltas,
    describe_edit_hparams,
    resolve_edit_hparams,
    tabulate_edit_deltas,
)


def create_pipeline(**kwargs) -> Pipeline:
    """hparams files + the model's architecture -> edit_hparams; probes (the direct
    ones; every one's KG fact, with entailed_facts, for IKE), model, edit_hparams ->
    edit_deltas + edit_manifest."""
    return namespaced(
        "editing",
        [
            Node(
                func=resolve_edit_hparams,
                inputs=[
                    "hparams_files",
                    "model",
                    "params:model_families",
                    "params:editing",
                ],
                outputs=["edit_hparams", "hparams_provenance"],
                name="resolve_edit_hparams",
            ),
            Node(
                func=describe_edit_hparams,
                inputs=["edit_hparams", "hparams_provenance", "params:editing"],
                outputs="edit_run_params",
                name="describe_edit_hparams",
            ),
            Node(
                func=compute_edit_deltas,
                inputs=[
                    "probes",
                    "entailed_facts",
                    "model",
                    "edit_hparams",
                    "edit_deltas_stored",
                    "covariance_stats",
                    "params:editing",
                    "params:compute",
                ],
                outputs="edit_deltas",
                name="compute_edit_deltas",
            ),
            Node(
                func=tabulate_edit_deltas,
                inputs="edit_deltas",
                outputs="edit_manifest",
                name="tabulate_edit_deltas",
            ),
        ],
    )
