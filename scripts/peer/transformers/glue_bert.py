# Peer-run glue (torchdevice): a tiny BERT for transformers 5.23's own ModelTesterMixin.
# Only this configuration glue is torchdevice's; every test comes from transformers' test_modeling_common.
import unittest

from transformers import BertConfig, is_torch_available
from transformers.testing_utils import require_torch

from ..test_modeling_common import ModelTesterMixin, ids_tensor, random_attention_mask

if is_torch_available():
    from transformers import BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification, BertModel


class BertModelTester:
    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, vocab_size=99, hidden_size=32,
                 num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, type_vocab_size=16, num_labels=3):
        self.parent = parent
        self.batch_size, self.seq_length, self.is_training = batch_size, seq_length, is_training
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.type_vocab_size, self.num_labels = type_vocab_size, num_labels

    def get_config(self):
        return BertConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                          num_hidden_layers=self.num_hidden_layers, num_attention_heads=self.num_attention_heads,
                          intermediate_size=self.intermediate_size, hidden_act="gelu", hidden_dropout_prob=0.1,
                          attention_probs_dropout_prob=0.1, max_position_embeddings=512,
                          type_vocab_size=self.type_vocab_size, initializer_range=0.02, num_labels=self.num_labels)

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        token_type_ids = ids_tensor([self.batch_size, self.seq_length], self.type_vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "token_type_ids": token_type_ids,
                                   "attention_mask": attention_mask}


@require_torch
class BertModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification) \
        if is_torch_available() else ()

    # transformers' device-map inference puts this tiny BERT wholly on "cpu" at 70% of its size on device 0
    # (the same natively: transformers.integrations.accelerate._get_device_map, no device involved), which
    # test_cpu_offload needs split: 80% splits it
    model_split_percents = [0.5, 0.8, 0.9]

    def setUp(self):
        self.model_tester = BertModelTester(self)
