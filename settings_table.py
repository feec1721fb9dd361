"""Print the table of every variable the project reads (docs/settings.md carries it as printed).

    python settings_table.py

It stands above the packages because it gathers each one's settings class — the server's (with its
backend's), the agent's, the RunPod worker's, the SageMaker entry's and the deploy tools' — and no
package may import those above it (the server neither the agent nor deploy). The rows come from
:meth:`backends.envsettings.EnvSettings.markdown_rows`, the one renderer.
"""

from __future__ import annotations

from agent.settings import AgentSettings
from backends.envsettings import EnvSettings, markdown_table
from deploy.runpod.settings import RunPodSettings
from deploy.sagemaker.settings import ServeSettings
from deploy.settings import DeploySettings
from server.settings import Settings

#: Every settings class of the project, in the table's order.
SETTINGS_CLASSES: list[type[EnvSettings]] = [Settings, AgentSettings, RunPodSettings, ServeSettings, DeploySettings]


def table() -> str:
    """The table of docs/settings.md."""
    return markdown_table(SETTINGS_CLASSES)


if __name__ == "__main__":
    print(table(), end="")
