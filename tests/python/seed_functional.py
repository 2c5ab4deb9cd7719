# The seed's second program ("方式二", the functional loop) with the network, loss and optimizer
# it reuses from the first, copied from ../../shared/seed with its line breaks restored and only
# these 7 lines changed (marked "# mixprec:"):
#   4 imports name mixprec instead of mindspore; device_target is "CPU" instead of "Ascend";
#   the train cell that build_train_network returns is named train_net, not net: the seed then
#     calls net(data), a train cell with one input, which fails in MindSpore too (build_train_network
#     has already made `net` itself mixed precision, which is what forward_fn needs);
#   the seed's mistake is fixed as examples/seed_functional.cpp does: forward_fn returns the SCALED
#     loss, so that `loss = scaler.unscale(loss)` gives the true loss back.
# The seed defines train_step but never calls it; test_seed_programs.py calls it on batches of
# 3200 Fashion-MNIST samples (its path and step count) and checks that the loss falls.
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

# 1. 定义损失函数和优化器
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)

from mixprec import amp  # mixprec:

# 1. 构建混合精度网络
# 这会将网络中的特定算子转换为FP16，并处理类型转换
train_net = amp.build_train_network(  # mixprec:
    network=net,
    optimizer=optimizer,
    loss_fn=loss_fn,
    level="O2",
    loss_scale_manager=None  # 手动控制时通常此处设None，后续手动缩放
)


# 或者在单步训练中手动处理
def train_step(data, label):
    # 定义前向计算
    def forward_fn(data, label):
        logits = net(data)
        loss = loss_fn(logits, label)
        # 开启自动混合精度上下文
        return scaler.scale(loss), logits  # mixprec:

    # 获取梯度函数
    grad_fn = ms.value_and_grad(forward_fn, None, optimizer.parameters, has_aux=True)

    # 启用Loss Scale (需配合StaticLossScaler或DynamicLossScaler)
    scaler = amp.StaticLossScaler(scale_value=1024.0)

    # 计算梯度（带缩放）
    (loss, _), grads = grad_fn(data, label)
    loss = scaler.unscale(loss)  # 缩放Loss
    grads = scaler.unscale(grads)  # 缩放梯度

    # 更新参数
    optimizer(grads)
    return loss
