# mixprec.dataset from Python: MindSpore's keywords, HWC images and HWC2CHW, Rescale / Normalize
# / TypeCast values, batching, both iterators, epochs of an iterator, the shuffle seed.
import numpy as np

import mixprec as ms
from mixprec.dataset import transforms, vision


def test_images_come_out_hwc_and_transforms_compute_what_they_say(fashion_mnist):
    raw = ms.dataset.FashionMnistDataset(fashion_mnist, usage="test", num_samples=10, shuffle=False).batch(5)
    image, label = next(iter(raw.create_tuple_iterator()))
    assert image.shape == (5, 28, 28, 1) and image.dtype == ms.uint8 and label.dtype == ms.int32
    pipe = ms.dataset.FashionMnistDataset(fashion_mnist, usage="test", num_samples=10, shuffle=False)
    pipe = pipe.map(operations=[vision.Rescale(1.0 / 255, 0), vision.Normalize([0.5], [0.25]), vision.HWC2CHW()],
                    input_columns="image")
    pipe = pipe.map(operations=transforms.TypeCast(ms.int64), input_columns="label").batch(5, drop_remainder=True)
    item = next(iter(pipe.create_dict_iterator(output_numpy=True)))
    want = (image.asnumpy().astype(np.float64) / 255 - 0.5) / 0.25
    np.testing.assert_allclose(item["image"], want.transpose(0, 3, 1, 2), rtol=1e-6, atol=1e-6)
    assert item["label"].dtype == np.int64 and item["label"].tolist() == label.asnumpy().tolist()


def test_batching_sizes_and_iterator_epochs(fashion_mnist):
    ds = ms.dataset.FashionMnistDataset(fashion_mnist, usage="train", num_samples=100, shuffle=False)
    assert ds.batch(32).get_dataset_size() == 4 and ds.batch(32, drop_remainder=True).get_dataset_size() == 3
    sizes = [img.shape[0] for img, _ in ds.batch(32).create_tuple_iterator()]
    assert sizes == [32, 32, 32, 4]
    ms.dataset.config.set_seed(11)
    shuffled = ms.dataset.FashionMnistDataset(fashion_mnist, usage="train", num_samples=100).batch(100)
    it = shuffled.create_tuple_iterator(num_epochs=2)
    epochs = [[lbl.asnumpy().tolist() for _, lbl in it] for _ in range(2)]
    assert len(epochs[0]) == 1 and epochs[0] != epochs[1]  # each pass is the next epoch, reshuffled
    again = [lbl.asnumpy().tolist() for _, lbl in shuffled.create_tuple_iterator()]
    assert again == epochs[0]  # the same seed gives the same order
