"""The PyTorch side of kiln's parity tests: each reference model built exactly as
kiln's tests build theirs (same configurations), with a fixed seed.

Small configurations are committed under tests/data/parity; full-size ones are
generated where PyTorch is and checked there (see make_reference.py).
"""
import torch
import torch.nn as nn
import torchvision
from torchvision.models.resnet import BasicBlock, Bottleneck, ResNet


def narrow_resnet(block, layers, widths, num_classes):
    """torchvision's ResNet with the stage widths as a parameter (torchvision
    fixes them at 64, 128, 256, 512); built with torchvision's own blocks,
    _make_layer and forward, so names and structure are torchvision's."""
    m = ResNet.__new__(ResNet)
    nn.Module.__init__(m)
    m._norm_layer = nn.BatchNorm2d
    m.inplanes, m.dilation, m.groups, m.base_width = widths[0], 1, 1, 64
    m.conv1 = nn.Conv2d(3, widths[0], kernel_size=7, stride=2, padding=3, bias=False)
    m.bn1 = nn.BatchNorm2d(widths[0])
    m.relu = nn.ReLU(inplace=True)
    m.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
    m.layer1 = m._make_layer(block, widths[0], layers[0])
    m.layer2 = m._make_layer(block, widths[1], layers[1], stride=2)
    m.layer3 = m._make_layer(block, widths[2], layers[2], stride=2)
    m.layer4 = m._make_layer(block, widths[3], layers[3], stride=2)
    m.avgpool = nn.AdaptiveAvgPool2d((1, 1))
    m.fc = nn.Linear(widths[3] * block.expansion, num_classes)
    for mod in m.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
    return m


def randomize_batchnorm(model):
    """Non-trivial affine parameters and running statistics, so eval-mode
    BatchNorm is not the identity it is right after init."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
                mod.num_batches_tracked.fill_(7)


class LSTMNet(nn.Module):
    """nn.LSTM(batch_first=True) then a linear head on the last step."""

    def __init__(self, input_size=256, hidden_size=512, num_layers=2, num_classes=10):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


# name -> (builder, the kiln configuration it mirrors). Keep in step with
# tests/models/parity_test.cpp.
def build(name):
    from transformers import BertConfig, BertForSequenceClassification, BertModel
    if name == "resnet_small":        # narrow ResNet-50 layout
        return randomized(narrow_resnet(Bottleneck, [2, 1, 1, 1], [8, 16, 32, 64], 10))
    if name == "resnet_basic_small":  # narrow ResNet-18 layout
        return randomized(narrow_resnet(BasicBlock, [1, 1, 1, 1], [8, 16, 32, 64], 10))
    if name == "resnet50":
        return randomized(torchvision.models.resnet50(weights=None))
    if name == "bert_small":          # a fine-tuned classifier checkpoint: keys carry "bert."
        config = BertConfig(vocab_size=256, hidden_size=128, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=256,
                            max_position_embeddings=64, num_labels=3,
                            attn_implementation="eager")
        return BertForSequenceClassification(config)
    if name == "bert_base":           # BertModel(BertConfig()): bert-base-uncased's shape
        return BertModel(BertConfig(attn_implementation="eager"))
    if name == "lstm_small":
        return LSTMNet(16, 32, 2, 10)
    if name == "lstm":
        return LSTMNet()
    raise ValueError(f"unknown reference model {name!r}")


def randomized(model):
    randomize_batchnorm(model)
    return model


def inputs(name, generator):
    """The inputs of each case, drawn from generator."""
    g = generator
    if name in ("resnet_small", "resnet_basic_small"):
        return {"images": torch.randn(2, 3, 64, 64, generator=g)}
    if name == "resnet50":
        return {"images": torch.randn(2, 3, 224, 224, generator=g)}
    if name.startswith("bert"):
        vocab, batch, seq = (256, 2, 24) if name == "bert_small" else (30522, 2, 128)
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[1, seq - seq // 3:] = 0  # the second sequence is padded
        types = torch.zeros(batch, seq, dtype=torch.int64)
        types[:, seq // 2:] = 1       # a second segment
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if name == "lstm_small":
        return {"x": torch.randn(3, 7, 16, generator=g)}
    if name == "lstm":
        return {"x": torch.randn(1, 128, 256, generator=g)}
    raise ValueError(name)


def encoder(model):
    """The module kiln mirrors (the BertModel inside a classifier)."""
    return model.bert if hasattr(model, "bert") else model


def outputs(model, name, x):
    """Named outputs of one forward pass."""
    if name.startswith("bert"):
        out = encoder(model)(**x)
        return {"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output}
    if name.startswith("resnet"):
        return {"logits": model(x["images"])}
    return {"logits": model(x["x"])}
