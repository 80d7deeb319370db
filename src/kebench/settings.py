"""Project settings. See https://docs.kedro.org/en/stable/kedro_project_setup/settings.html."""

from kedro.config import OmegaConfigLoader
from omegaconf.resolvers import oc

from kebench.editing.profiles import machine_profile
from kebench.hooks import (
    MlflowRunHook,
    RunSummaryHook,
    UpstreamOutputsHook,
    UserErrorHook,
)
from kebench.models.registry import output_key
from kebench.third_party_warnings import route_third_party_warnings

# every kedro command and `kebench edits` import these settings before they read the
# configuration, where Kedro's OmegaConf calls warn of their own deprecation
route_third_party_warnings()

HOOKS = (UpstreamOutputsHook(), MlflowRunHook(), RunSummaryHook(), UserErrorHook())

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # ${oc.env:KEBENCH_DATA_DIR,...} locates the reference data outside the repo.
    # ${model_key:...} is the folder name of a model's outputs (docs/models.md).
    # ${machine_profile:} is the hparams profile of a run that names none (docs/editing.md).
    "custom_resolvers": {
        "oc.env": oc.env,
        "model_key": output_key,
        "machine_profile": machine_profile,
    },
}
