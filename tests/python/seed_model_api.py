# The seed's first program ("方式一", the Model API), copied from ../../shared/seed with its line
# breaks restored and only these 9 lines changed (marked "# mixprec:"):
#   5 imports name mixprec instead of mindspore; device_target is "CPU" instead of "Ascend";
#   the dataset the seed assumes ("假设 dataset 已定义") is defined (2 lines, with its path);
#   the commented-out model.train line runs, with epoch=1 instead of 10 (the step count).
# test_seed_programs.py runs it on 3200 Fashion-MNIST samples and checks that the loss falls.
import mixprec as ms  # mixprec:
from mixprec import nn, ops  # mixprec:
from mixprec.common.initializer import Normal  # mixprec:

# 设置运行设备为Ascend
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")  # mixprec:


# 定义一个简单的网络用于演示
class SimpleNet(nn.Cell):
    def __init__(self):
        super(SimpleNet, self).__init__()
        # 这里的卷积层等计算密集型算子，在O2模式下会自动走FP16
        self.conv1 = nn.Conv2d(1, 32, 3, pad_mode='valid', weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(32 * 26 * 26, 10)

    def construct(self, x):
        x = self.conv1(x)
        x = self.relu(x)
        x = self.flatten(x)
        x = self.fc(x)
        return x


net = SimpleNet()

from mixprec.train import Model, LossMonitor  # mixprec:
from mixprec.train.loss_scale_manager import FixedLossScaleManager  # mixprec:

# 1. 定义损失函数和优化器
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)

# 2. 配置Loss Scale
# Ascend上FP16容易下溢，通常给一个较大的固定值（如1024.0）或者使用动态
loss_scale_manager = FixedLossScaleManager(1024.0, drop_overflow_update=False)

# 3. 初始化Model，传入amp_level="O2"
# keep_batchnorm_fp32=False 在O2模式下默认为None，通常系统会自动处理
model = Model(
    network=net,
    loss_fn=loss_fn,
    optimizer=optimizer,
    metrics={"Accuracy": nn.Accuracy()},
    amp_level="O2",  # <--- 核心：开启混合精度
    loss_scale_manager=loss_scale_manager
)

# 4. 开始训练 (假设 dataset 已定义)
dataset = ms.dataset.FashionMnistDataset("/usr/share/datasets/fashion-mnist", usage="train", num_samples=3200)  # mixprec:
dataset = dataset.map(operations=[ms.dataset.vision.Rescale(1.0 / 255, 0), ms.dataset.vision.HWC2CHW()], input_columns="image").batch(64, drop_remainder=True)  # mixprec:
model.train(epoch=1, train_dataset=dataset, callbacks=[LossMonitor()])  # mixprec:
