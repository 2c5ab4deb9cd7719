# Bring your own data (issue 31, item 3): ds.NumpySlicesDataset and ds.GeneratorDataset over the
# user's arrays and sources, with map / batch / shuffle / sharding / create_tuple_iterator, odd
# lengths, wrong dtypes, ragged samples and a raising generator; a network trained on numpy arrays
# and on a generator through Model.train, and evaluated with Model.eval.
import traceback

import numpy as np
import pytest

import mixprec as ms
from mixprec import nn
from mixprec.train import Callback, Model
import mixprec.dataset as ds


def blobs(n, seed=0):
    """Two separable classes in 8 dims: float32 features, int32 labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.int32)
    x = rng.standard_normal((n, 8)) + (2.0 * y[:, None] - 1.0) * 1.5
    return x.astype(np.float32), y


def rows(d, **kw):
    return [(a.asnumpy(), b.asnumpy()) for a, b in d.create_tuple_iterator(num_epochs=1, **kw)]


def test_numpy_slices_tuple_dict_and_list_with_odd_lengths():
    x, y = blobs(7)
    for data, names in [((x, y), ["column_0", "column_1"]), ({"features": x, "target": y}, ["features", "target"]),
                        ([x, y], ["column_0", "column_1"])]:
        d = ds.NumpySlicesDataset(data, shuffle=False).batch(3)
        assert d.get_dataset_size() == 3  # 7 rows: 3 + 3 + 1
        got = rows(d)
        assert [a.shape for a, _ in got] == [(3, 8), (3, 8), (1, 8)]
        np.testing.assert_array_equal(np.concatenate([a for a, _ in got]), x)
        np.testing.assert_array_equal(np.concatenate([b for _, b in got]), y)
        assert got[0][0].dtype == np.float32 and got[0][1].dtype == np.int32
        first = next(iter(d.create_dict_iterator(num_epochs=1, output_numpy=True)))
        assert sorted(first) == sorted(names)
    d = ds.NumpySlicesDataset((x, y), shuffle=False).batch(3, drop_remainder=True)
    assert d.get_dataset_size() == 2


def test_numpy_slices_column_names_map_and_shuffle():
    x, y = blobs(10)
    d = ds.NumpySlicesDataset((x, y), column_names=["data", "label"], shuffle=True)
    got = rows(d.batch(10))
    assert not np.array_equal(got[0][1], y) or not np.array_equal(got[0][0], x)  # permuted
    order = np.argsort([np.where((x == r).all(1))[0][0] for r in got[0][0]])
    np.testing.assert_array_equal(np.sort(got[0][1]), np.sort(y))
    assert len(order) == 10
    scaled = ds.NumpySlicesDataset((x, y), column_names=["data", "label"], shuffle=False)
    scaled = scaled.map(operations=ds.transforms.TypeCast(ms.float16), input_columns="data").batch(5)
    a, _ = rows(scaled)[0]
    assert a.dtype == np.float16
    np.testing.assert_allclose(a, x[:5].astype(np.float16))


def test_numpy_slices_shards_are_disjoint_and_equal():
    x, y = blobs(11)
    y = np.arange(11, dtype=np.int32)
    seen = []
    for k in range(3):
        d = ds.NumpySlicesDataset((x, y), shuffle=False, num_shards=3, shard_id=k).batch(2)
        labels = np.concatenate([b for _, b in rows(d)])
        assert len(labels) == 3  # floor(11 / 3) each
        seen.extend(labels.tolist())
    assert len(set(seen)) == 9
    with pytest.raises(ValueError, match="num_shards and shard_id"):
        ds.NumpySlicesDataset((x, y), num_shards=2)


def test_numpy_slices_errors_name_the_problem():
    x, y = blobs(6)
    with pytest.raises(ValueError, match=r"column 'column_0' has 6 samples but column 'column_1' has 5"):
        ds.NumpySlicesDataset((x, y[:5]))
    with pytest.raises(TypeError, match=r"column 'label' has numpy dtype <U1; expected numbers"):
        ds.NumpySlicesDataset({"data": x, "label": np.array(list("abcdef"))})
    with pytest.raises(TypeError, match=r"column 'column_0' has numpy dtype object"):
        ds.NumpySlicesDataset((np.array([{}, {}], dtype=object), y[:2]))
    ragged = [np.zeros(3, np.float32), np.zeros(3, np.float32), np.zeros(4, np.float32)]
    with pytest.raises(ValueError, match=r"sample 2 of column 'column_0' has shape \(4,\) but sample 0 has \(3,\)"):
        ds.NumpySlicesDataset((ragged, y[:3]))
    with pytest.raises(ValueError, match="expected two columns"):
        ds.NumpySlicesDataset((x, y, y))


class Squares:
    """A random-access source: __getitem__ and __len__."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return np.full(3, i, np.float32), np.int32(i * i)


def test_generator_dataset_iterable_random_access_and_function():
    def gen():
        for i in range(5):
            yield np.full(3, i, np.float32), np.int32(i * i)

    for source, shuffled in [(gen, False), (gen(), False), (Squares(), True)]:
        d = ds.GeneratorDataset(source, column_names=["data", "label"]).batch(2)
        got = rows(d)
        assert [a.shape for a, _ in got] == [(2, 3), (2, 3), (1, 3)]
        labels = np.concatenate([b for _, b in got])
        if shuffled:
            np.testing.assert_array_equal(np.sort(labels), [0, 1, 4, 9, 16])
        else:
            np.testing.assert_array_equal(labels, [0, 1, 4, 9, 16])
        np.testing.assert_array_equal(np.concatenate([a for a, _ in got])[:, 0] ** 2, labels)
    d = ds.GeneratorDataset(Squares(), column_names=["data", "label"], shuffle=False, num_shards=2, shard_id=1)
    np.testing.assert_array_equal(np.concatenate([b for _, b in rows(d)]), [1, 9])


def test_generator_dataset_errors():
    def ragged():
        yield np.zeros(3, np.float32), np.int32(0)
        yield np.zeros(3, np.float32), np.int32(1)
        yield np.zeros(2, np.float32), np.int32(2)

    with pytest.raises(ValueError, match=r"sample 2 of column 'data' has shape \(2,\) but sample 0 has \(3,\)"):
        ds.GeneratorDataset(ragged, column_names=["data", "label"])

    def one_value():
        yield np.zeros(3, np.float32)

    with pytest.raises(ValueError, match=r"sample 0 must be a tuple of 2 values \(data, label\)"):
        ds.GeneratorDataset(one_value, column_names=["data", "label"])

    def strings():
        yield np.zeros(3, np.float32), "cat"

    with pytest.raises(TypeError, match=r"column 'label' has numpy dtype <U3"):
        ds.GeneratorDataset(strings, column_names=["data", "label"])


class SourceBroke(Exception):
    pass


def test_a_generator_that_raises_reaches_the_caller_with_its_traceback():
    def gen():
        yield np.zeros(3, np.float32), np.int32(0)
        raise SourceBroke("sample 1 is unreadable")

    with pytest.raises(SourceBroke, match="sample 1 is unreadable") as info:
        ds.GeneratorDataset(gen, column_names=["data", "label"])
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "gen" in frames  # the user's frame is in the traceback

    class Broken(Squares):
        def __getitem__(self, i):
            if i == 3:
                raise KeyError(f"no sample {i}")
            return super().__getitem__(i)

    with pytest.raises(KeyError, match="no sample 3"):
        ds.GeneratorDataset(Broken(), column_names=["data", "label"])


class Losses(Callback):
    def __init__(self):
        super().__init__()
        self.values = []

    def on_train_step_end(self, run_context):
        self.values.append(float(run_context.original_args().net_outputs))


def train_and_eval(train_ds, test_ds):
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(8, 16, activation="relu"), nn.Dense(16, 2))
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-2)
    model = Model(net, loss_fn, opt, metrics={"Accuracy": nn.Accuracy()})
    rec = Losses()
    model.train(3, train_ds, callbacks=[rec])
    return rec.values, model.eval(test_ds)["Accuracy"]


def test_a_user_trains_on_numpy_arrays_through_model_train():
    x, y = blobs(300)
    tx, ty = blobs(100, seed=1)
    train_ds = ds.NumpySlicesDataset({"data": x, "label": y}, shuffle=True).batch(32)
    test_ds = ds.NumpySlicesDataset({"data": tx, "label": ty}, shuffle=False).batch(50)
    losses, acc = train_and_eval(train_ds, test_ds)
    assert len(losses) == 3 * 10  # 300 rows, batch 32: 10 batches (the last holds 12)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]), losses
    assert acc > 0.9, acc


def test_a_user_trains_on_a_generator_through_model_train():
    x, y = blobs(256)
    tx, ty = blobs(100, seed=1)

    def samples():
        for i in range(len(y)):
            yield x[i], y[i]

    train_ds = ds.GeneratorDataset(samples, column_names=["data", "label"], shuffle=True).batch(32, drop_remainder=True)
    test_ds = ds.GeneratorDataset(list(zip(tx, ty)), column_names=["data", "label"], shuffle=False).batch(50)
    losses, acc = train_and_eval(train_ds, test_ds)
    assert len(losses) == 3 * 8
    assert np.mean(losses[-5:]) < np.mean(losses[:5]), losses
    assert acc > 0.9, acc
