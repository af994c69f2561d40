"""Regenerate the bag-of-words example model and its data file, deterministically.

    python examples/bag_of_words/make_model.py [OUTPUT_DIR]

Writes model.pt (TorchScript: a bag-of-words classifier that tokenizes its text input
itself, lower-cased and split on whitespace against its own vocabulary, and adds a bag of
the token ids of its variable-length integer input; it answers three class scores and the
name of the best class) and requests.jsonl (48 requests of 4, 16 and 64 tokens and words,
one a line) into OUTPUT_DIR (default: this folder).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

SEED = 20261203
CLASSES = ["billing", "delivery", "other"]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
         "invoice", "refund", "charge", "parcel", "courier", "late", "address", "hello"]
TOKEN_IDS = 100          # token ids from 0 to 99; larger ones count as the last
LENGTHS = (4, 16, 64)


class BagOfWords(nn.Module):
    """Class scores of a text and its token ids: the sum of the text's word vectors (words
    outside the vocabulary share one) plus the mean of the tokens' vectors."""

    def __init__(self) -> None:
        super().__init__()
        self.vocabulary: dict[str, int] = {word: index + 1 for index, word in enumerate(WORDS)}
        self.classes: list[str] = list(CLASSES)
        self.largest_token = TOKEN_IDS - 1
        self.words = nn.EmbeddingBag(len(WORDS) + 1, len(CLASSES), mode="sum")
        self.tokens = nn.EmbeddingBag(TOKEN_IDS, len(CLASSES), mode="mean")

    def forward(self, tokens: torch.Tensor, text: list[str]) -> tuple[torch.Tensor, list[str]]:
        ids: list[int] = []
        offsets: list[int] = []
        for line in text:
            offsets.append(len(ids))
            for word in line.lower().split():
                ids.append(self.vocabulary.get(word, 0))
        scores = self.words(torch.tensor(ids, dtype=torch.long),
                            torch.tensor(offsets, dtype=torch.long))
        scores = scores + self.tokens(tokens.clamp(0, self.largest_token))
        best: list[int] = scores.argmax(dim=1).tolist()
        return scores, [self.classes[index] for index in best]


def make(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    scripted = torch.jit.script(BagOfWords().eval())
    torch.jit.save(scripted, str(output / "model.pt"))
    rng = np.random.default_rng(SEED)
    with (output / "requests.jsonl").open("w") as lines:
        for index in range(48):
            length = LENGTHS[index % len(LENGTHS)]
            words = [WORDS[i] for i in rng.integers(0, len(WORDS), size=length)]
            text = " ".join(word.capitalize() if i == 0 else word
                            for i, word in enumerate(words))
            tokens = rng.integers(0, TOKEN_IDS, size=length).tolist()
            lines.write(json.dumps({"tokens": tokens, "text": text}) + "\n")


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
