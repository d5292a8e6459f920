"""sim renames torch's PrivateUse1 device and registers ``torch.sim`` for the whole process, which
changes what ``torch.accelerator`` reports to every other test. Its tests therefore run in a pytest
process of their own: ``tox -e sim`` (TORCHDEVICE_SIM_TESTS=1); the default run leaves them out."""
import os

if os.environ.get("TORCHDEVICE_SIM_TESTS") != "1":
    collect_ignore_glob = ["tests/*"]
