"""Public answers added for plugin authors and users (issue 12): the distributed engine and
each backend's description, in the API and in `torchdevice info`."""
from __future__ import annotations

import json
import sys

from helpers import run_command

import torchdevice
from torchdevice.cpu import CPUBackend, CPUCollectives


def test_dist_backend_is_the_active_backends_engine(on_cpu):
    assert torchdevice.dist_backend() == CPUCollectives.dist_backend == "gloo"


def test_info_shows_each_backends_description():
    table = run_command([sys.executable, "-m", "torchdevice", "info"], env={"TORCHDEVICE_PLUGINS": ""})
    assert table.returncode == 0, str(table)
    assert f"cpu  {CPUBackend.description}" in table.stdout, table.stdout
    data = json.loads(run_command([sys.executable, "-m", "torchdevice", "info", "--json"],
                                  env={"TORCHDEVICE_PLUGINS": ""}).stdout)
    assert {b["name"]: b["description"] for b in data["backends"]}["cpu"] == CPUBackend.description
