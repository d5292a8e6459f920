# Peer-run glue (torchdevice): a tiny Llama for transformers 5.23's own ModelTesterMixin.
# Only this configuration glue is torchdevice's; every test comes from transformers' test_modeling_common.
import unittest

from transformers import LlamaConfig, is_torch_available
from transformers.testing_utils import require_torch

from ..test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask

if is_torch_available():
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel


class LlamaModelTester:
    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, vocab_size=99, hidden_size=32,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37):
        self.parent = parent
        self.batch_size, self.seq_length, self.is_training = batch_size, seq_length, is_training
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads = num_key_value_heads

    def get_config(self):
        return LlamaConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                           num_hidden_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
                           num_key_value_heads=self.num_key_value_heads, intermediate_size=self.intermediate_size,
                           max_position_embeddings=512, pad_token_id=0)

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


@require_torch
class LlamaModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification) if is_torch_available() else ()
    # generate() is covered by GenerationTesterMixin (tests/generation, not in the sdist: stubbed), so no class
    # is declared generative here, as test_generation_tester_mixin_inheritance asks of such testers
    all_generative_model_classes = ()

    def setUp(self):
        self.model_tester = LlamaModelTester(self)
