# The seed's two programs (seed_model_api.py, seed_functional.py: copies with the changed lines
# counted in their headers) run under `import mixprec as ms` on 3200 Fashion-MNIST samples, and
# the loss falls.
import os
import re
import runpy

import mixprec as ms
from conftest import mean_loss_fell

HERE = os.path.dirname(os.path.abspath(__file__))


def test_seed_model_api_program_trains_and_the_loss_falls(fashion_mnist, capfd):
    ns = runpy.run_path(os.path.join(HERE, "seed_model_api.py"))
    printed = capfd.readouterr().out
    losses = [float(x) for x in re.findall(r"step: \d+, loss is ([0-9.]+)", printed)]
    assert len(losses) == 50  # 3200 samples, batch 64, one epoch
    assert mean_loss_fell(losses), losses
    # The seed's Model also evaluates: its Accuracy metric on the test split beats chance.
    v = ms.dataset.vision
    test = ms.dataset.FashionMnistDataset(fashion_mnist, usage="test", num_samples=1000, shuffle=False)
    test = test.map(operations=[v.Rescale(1.0 / 255, 0), v.HWC2CHW()], input_columns="image").batch(250)
    assert ns["model"].eval(test)["Accuracy"] > 0.5


def test_seed_functional_program_trains_and_the_loss_falls(fashion_mnist):
    ns = runpy.run_path(os.path.join(HERE, "seed_functional.py"))
    v = ms.dataset.vision
    data = ms.dataset.FashionMnistDataset(fashion_mnist, usage="train", num_samples=3200)
    data = data.map(operations=[v.Rescale(1.0 / 255, 0), v.HWC2CHW()], input_columns="image").batch(64, drop_remainder=True)
    losses = [ns["train_step"](image, label).item() for image, label in data.create_tuple_iterator()]
    assert len(losses) == 50
    assert mean_loss_fell(losses), losses
    # build_train_network made the network itself O2: the first layer ran in bf16, the loss in f32.
    assert isinstance(ns["train_net"], ms.amp.TrainOneStepCell)
