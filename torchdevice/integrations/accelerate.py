"""stub"""
from . import Integration


class AccelerateIntegration(Integration):
    name = "accelerate"
    framework = "stub"
    modules = ("accelerate.accelerator",)

    def install(self, patcher, target, module):
        pass
