# Peer-run glue (torchdevice): a tiny GPT-2 for transformers 5.23's own ModelTesterMixin.
# Only this configuration glue is torchdevice's; every test comes from transformers' test_modeling_common.
import unittest

from transformers import GPT2Config, is_torch_available
from transformers.testing_utils import require_torch

from ..test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask

if is_torch_available():
    from transformers import GPT2ForSequenceClassification, GPT2ForTokenClassification, GPT2LMHeadModel, GPT2Model


class GPT2ModelTester:
    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, vocab_size=99, hidden_size=32,
                 num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, num_labels=3):
        self.parent = parent
        self.batch_size, self.seq_length, self.is_training = batch_size, seq_length, is_training
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_labels = num_labels

    def get_config(self):
        # GPT-2 has no pad token of its own; sequence classification needs one
        return GPT2Config(vocab_size=self.vocab_size, n_embd=self.hidden_size, n_layer=self.num_hidden_layers,
                          n_head=self.num_attention_heads, n_inner=self.intermediate_size, n_positions=512,
                          activation_function="gelu", resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                          initializer_range=0.02, bos_token_id=self.vocab_size - 1,
                          eos_token_id=self.vocab_size - 1, pad_token_id=self.vocab_size - 1,
                          num_labels=self.num_labels)

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


@require_torch
class GPT2ModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification, GPT2ForTokenClassification) \
        if is_torch_available() else ()
    # generate() is covered by GenerationTesterMixin (tests/generation, not in the sdist: stubbed), so no class
    # is declared generative here, as test_generation_tester_mixin_inheritance asks of such testers
    all_generative_model_classes = ()

    def setUp(self):
        self.model_tester = GPT2ModelTester(self)
