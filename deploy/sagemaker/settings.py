"""The SageMaker container entry's own variables (``deploy/sagemaker/serve``), declared once with
their defaults and meanings; the table in docs/settings.md lists them through :meth:`ServeSettings.markdown_rows`.
The server's variables (``KOKORO_MODEL_DIR``, ``KOKORO_BACKEND`` ...) are declared by the server."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from backends.envsettings import EnvSettings

SAGEMAKER_MODEL_DIR = Path("/opt/ml/model")


class ServeSettings(EnvSettings):
    """Where the container entry looks for the model. Immutable once built."""

    model_config = SettingsConfigDict(env_prefix="KOKORO_")

    sm_model_dir: Path = Field(
        SAGEMAKER_MODEL_DIR,
        description="SageMaker entry: where SageMaker unpacks `model.tar.gz` (override to run the entry outside a "
        "container).",
    )
    image_model_dir: Path | None = Field(
        None, description="SageMaker entry: the assets baked into the image, used when `model.tar.gz` brought none."
    )
