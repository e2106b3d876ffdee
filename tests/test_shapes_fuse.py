"""Fused GEMMs in a run of many (issue 41's leftovers): a shapes file's ``fuse`` column, a
command's ``--fuse`` (or ``--layout``) with a list that holds a convolution refused before
anything runs in one line naming the entry, and ``bocast shapes`` listing a linear layer with a
bias as the GEMM with ``fuse: bias`` (bocast.run.shapes_file, bocast.run.model_shapes)."""

from __future__ import annotations

import pytest

from bocast import cli, many_plan
from bocast.run.shapes_file import Shape, ShapesError, read, write

CONV = '"8,14,14,64,64,3,3,1,1,1"'


def test_the_fuse_column_round_trips_and_sets_the_workloads_epilogue(tmp_path):
    entries = [Shape("gemm", (256, 512, 256), "bf16:bf16", "NT", 2, "up", fuse="bias+gelu"),
               Shape("gemm", (256, 512, 256), "bf16:bf16", "NT", 2, "q"),
               Shape("conv2d", (8, 14, 14, 64, 64, 3, 3, 1, 1, 1), "bf16:bf16")]
    for ext, first in (("csv", 2), ("yaml", 1)):  # the line of the first entry
        write(str(tmp_path / f"s.{ext}"), entries)
        assert read(str(tmp_path / f"s.{ext}")) == [
            Shape(e.op, e.shape, e.dtype, e.layout, e.count, e.name, first + i, e.fuse)
            for i, e in enumerate(entries)]
    assert (tmp_path / "s.csv").read_text().splitlines()[0] == \
        "op,shape,dtype,layout,fuse,count,name"
    # a file without fusions is written as before: no fuse column
    write(str(tmp_path / "plain.csv"), entries[1:])
    assert (tmp_path / "plain.csv").read_text().splitlines()[0] == \
        "op,shape,dtype,layout,count,name"
    plan = many_plan.prepare_many(None, str(tmp_path / "s.csv"), runner="standin",
                                  output=str(tmp_path / "run"))
    assert [it.workload.get("fuse") for it in plan.items] == ["bias+gelu", None, None]
    # the fused and the plain GEMM of one shape are two workloads, in two folders
    assert plan.items[0].folder != plan.items[1].folder
    assert plan.items[0].text == "gemm 256x512x256 bf16:bf16 NT bias+gelu v3"


def test_a_fuse_on_a_convolutions_line_is_the_files_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(f"op,shape,fuse\ngemm,256x512x256,bias\nconv2d,{CONV},bias\n")
    with pytest.raises(ShapesError, match=r"bad\.csv line 3: fuse 'bias': conv2d takes no "
                                          r"fuse$"):
        read(str(bad))


def test_a_commands_fuse_is_every_workloads_so_a_list_with_a_conv_is_refused(tmp_path, capsys):
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(f"op,shape\ngemm,256x512x256\nconv2d,{CONV}\n")
    out = tmp_path / "run"
    for flag in (["--fuse", "bias"], ["--layout", "NT"]):
        assert cli.main(["tune", "--shapes", str(mixed), "--runner", "standin", *flag,
                         "--output", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"{flag[0]} {flag[1]}: {mixed} line 3 is conv2d, which takes " \
            f"no {flag[0][2:]}" in err and f"the shapes file's {flag[0][2:]} column, on the " \
            "gemm lines" in err, err
    assert not out.exists()  # refused before anything is written
    # a list of convolutions alone: the operator takes none
    with pytest.raises(ShapesError, match=r"^--fuse bias: conv2d takes no fuse \(--shape "):
        many_plan.prepare_many("conv2d", ["8,14,14,64,64,3,3", "8,14,14,64,128,3,3"],
                               runner="standin", fuse="bias", output=str(out))
    # GEMMs alone take it; an entry's own fuse stays its own
    gemms = tmp_path / "gemms.csv"
    gemms.write_text("op,shape,fuse\ngemm,256x512x256,\ngemm,256x1024x256,bias+relu\n")
    plan = many_plan.prepare_many(None, str(gemms), runner="standin", fuse="bias",
                                  output=str(out))
    assert [it.workload.get("fuse") for it in plan.items] == ["bias", "bias+relu"]


def _shapes(model, *inputs):
    import bocast

    found = bocast.shapes_of(model, *inputs)
    return ([(e.op, e.shape, e.layout, e.fuse, e.count) for e in found], found.skipped,
            found.unfused)


def test_a_biased_addmm_is_a_fused_gemm_and_other_addmms_are_plain():
    torch = pytest.importorskip("torch")

    class Calls(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(64, 128)
            self.w = torch.nn.Parameter(torch.randn(64, 96))  # [K, N] rows: layout NN
            self.b = torch.nn.Parameter(torch.randn(96))

        def forward(self, x):
            y = self.linear(x)  # addmm(bias, x, W^T): gemm 32x128x64 NT, fuse bias
            torch.addmm(torch.randn(32, 128), x, self.linear.weight.t())  # a matrix: plain
            torch.addmm(self.b, x, self.w, beta=0.5)  # scaled: plain NN
            torch.addmm(self.b, x, self.w)  # NN: v3 fuses NT only; listed unfused
            return y

    got, skipped, unfused = _shapes(Calls(), torch.randn(32, 64))
    assert got == [("gemm", (32, 128, 64), "NT", "bias", 1),
                   ("gemm", (32, 128, 64), "NT", None, 1),
                   ("gemm", (32, 96, 64), "NN", None, 2)]  # the scaled and the unfused one
    assert skipped == []
    assert len(unfused) == 1 and unfused[0].startswith("gemm 32x96x64 fp16:fp32 fuse=bias "
                                                       "(1 calls): ")
    assert "layout NT" in unfused[0]


def test_bocast_shapes_writes_the_fuse_column(tmp_path, capsys):
    pytest.importorskip("torch")
    module = tmp_path / "mlp.py"
    module.write_text("import torch\n\ndef make():\n    model = torch.nn.Sequential("
                      "torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64, "
                      "bias=False))\n    return model, (torch.randn(128, 64),)\n")
    out = tmp_path / "mlp.csv"
    assert cli.main(["shapes", f"{module}:make", "--out", str(out)]) == 0
    assert out.read_text().splitlines() == [  # Sequential's layers 0 and 2 are written *
        "op,shape,dtype,layout,fuse,count,name", "gemm,128x256x64,fp16:fp32,NT,bias,1,*",
        "gemm,128x64x256,fp16:fp32,NT,,1,*"]
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["op", "shape", "dtype", "layout", "fuse", "count", "name"]
    assert table[1].split() == ["gemm", "128x256x64", "fp16:fp32", "NT", "bias", "1", "*"]
