# from tvm.script import ir as I
# from tvm.script import relax as R

@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 784), dtype="float32"), w1: R.Tensor((784, 128), dtype="float32"), w2: R.Tensor((128, 10), dtype="float32")) -> R.Tensor((1, 10), dtype="float32"):
        with R.dataflow():
            lv: R.Tensor((1, 128), dtype="float32") = R.matmul(x, w1, out_dtype=None)
            lv1: R.Tensor((1, 128), dtype="float32") = R.nn.relu(lv)
            lv2: R.Tensor((1, 10), dtype="float32") = R.matmul(lv1, w2, out_dtype=None)
            gv: R.Tensor((1, 10), dtype="float32") = R.nn.softmax(lv2, axis=-1)
            R.output(gv)
        return gv
