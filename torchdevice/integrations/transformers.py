"""stub"""
from . import Integration


class TransformersIntegration(Integration):
    name = "transformers"
    framework = "stub"
    modules = ("transformers.training_args",)

    def install(self, patcher, target, module):
        pass
