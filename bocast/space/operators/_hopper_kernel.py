"""Space v3's kernel generator: the Hopper GEMM body (TMA + wgmma + warp specialization) in TVM's
TIRx, shared by GEMM/bmm (``_hopper_matmul``) and conv2d's implicit GEMM (``_hopper_conv``).

No Hopper GEMM exists in TVM 0.27 (its s_tir schedules know mma.sync and WMMA only), so space v3
is not a schedule of a TE compute: it is a kernel template, a generator that takes a
configuration and returns a TIRx PrimFunc, compiled with ``tir_pipeline="tirx"`` for ``sm_90a``
(ptxas rejects wgmma on plain sm_90). The kernel follows CUTLASS's warp-specialized sm90 kernels
and ThunderKittens' H100 GEMM; it computes C[M, N] = A[M, K] B[N, K]^T, both operands K-major:

    one CTA per SM (persistent) or per tile; 128 x (1 + consumers) threads
    warpgroup 0, the producer (``setmaxnreg.dec``): one thread walks the CTA's tiles and k
      blocks, waits for a free stage (``empty[s]``), and issues two TMA loads (A, B boxes of
      BM x BK and BN x BK, 128- or 64-byte swizzle) that complete on ``full[s]``
    warpgroups 1..C, the consumers (``setmaxnreg.inc``): each owns BM / C rows of the tile; per k
      block it waits ``full[s]``, issues BK / 16 x (BM / C / 64) ``wgmma.mma_async m64nBNk16``
      from shared-memory descriptors, commits, waits (all groups, or all but the newest one) and
      frees the stage; at the end of a tile it stores its fp32 accumulators straight to C
      (``epilogue`` "v2": 8-byte stores, "scalar": 4-byte ones), or ("tma") box by box, 64 rows
      x 32 columns, into a shared-memory staging buffer in TMA's 128-byte swizzle, which one
      thread stores to C with ``cp.async.bulk.tensor`` (two buffers a consumer alternate)
    tiles in grouped order: ``raster`` block rows at a time (Triton's GROUP_M) for L2 reuse
    thread-block clusters (``cluster`` 2x1 or 1x2, CUTLASS's ClusterShape with multicast): two
      CTAs (a 1-D cluster of the grid) hold paired tiles at every step of their walk, 2x1 two
      block rows of one block column (they share B's tile), 1x2 two block columns of one block
      row (sharing A's). Each CTA's producer loads its own operand and its half of the shared
      one (a box of BN / 2 or BM / 2 rows), which ``.multicast::cluster`` (CTA mask 0b11)
      writes into both CTAs' stage s and completes on both CTAs' ``full[s]`` (each expects the
      whole stage's bytes); a stage is overwritten only when the consumers of both CTAs have
      released it (``empty[s]`` counts consumers x 2 arrivals; each release arrives on both
      CTAs' barriers, the peer's through its ``mapa`` shared::cluster address, CTA-scoped
      as CUTLASS's ClusterBarrier does; the producer's wait is CTA-scoped too). The barriers' inits
      are fenced for the cluster (``fence.mbarrier_init.release.cluster``) and a cluster
      barrier follows them, before any remote use; a cluster barrier ends the kernel, so no
      CTA exits while its peer may still arrive on its barriers. The launch gives the cluster
      dims (cuLaunchKernelEx, :attr:`TirxKernel.cluster`, as TVM's host code does)

Operand and output types (``Plan.in_dtype``, ``out_dtype``): fp16 or bf16 operands (wgmma
``.f16``/``.bf16``, k16) or fp8 (``.e4m3.e4m3``, or ``.e5m2.e4m3`` with A in e5m2 and B in
e4m3: ``Plan.b_dtype``; k32, no transpose flags: both operands K-major, as they are here),
fp32 accumulators always, an fp32 or 16-bit output (rounded pairs stored 4 bytes at a time, or
staged as 64-column boxes for TMA); every size derives from ``_hopper_layout.DTYPE_BYTES``:
fp8's 1-byte elements make BK 64 or 128 (64- or 128-byte swizzled rows, the same descriptors:
the start address still steps 32 bytes a wgmma). fp8 operands carry per-tensor scales
(``Plan.scaled``): the consumers multiply the accumulators by scale_a x scale_b once a tile,
after its last wgmma and before the epilogue rounds them. A GEMM's fused epilogue
(``Plan.fuse``, the workload's ``fuse``: bias, activation; ``_fuse.tile_macro``) follows the
scales there, on the same fp32 accumulators. Or block scales (``Plan.block_scaled``, BK 128):
each k block into a fresh tile, scaled and added into the accumulators (``_hopper_blockscale``).

What the template does not do yet: clusters of more than 2 CTAs, stmatrix for a 16-bit
output's staging, a conflict-free staging layout for an fp32 output (the swizzled box costs 2
shared-memory wavefronts a half-warp's store, see ``_hopper_layout.staging_offset``; a 16-bit
output's takes 1), overlapping a tile's epilogue with the next tile's main loop beyond what
ping-pong gives, the NN layout, fp8 with B in e5m2, an fp8 output.

One body, two operators. A :class:`Plan` is what a configuration fixes over an M x N x K matmul
(tile, ring, warpgroups, the tiles' walk, the launch); :func:`device_body` turns it into the
device code, a TIRx macro over the tensor maps of A and B and the output. An operator differs
only in its :class:`Operands` hooks: where A's box of a k block lies (GEMM: a 2-D map over
[b x M, K]; conv2d: a 4-D map over the NHWC input, the pixel tile shifted by the tap, or an
im2col map, the tile's pixels and the tap's offsets: ``Operands.a_offsets``) and how a
tile's rows reach the output (the direct stores' addresses and edge tests, the tma epilogue's
box store). B is a 2-D [rows, K] map (conv2d_transpose's 4-D: ``Operands.b_coords``). Each
operator's ``kernel`` declares its buffers and tensor maps in its own prim_func (their names
are the kernel's parameters and what the runner binds) and calls the body there.
"""

# ruff: noqa: F821 - the kernel's scalars (desc_a: T.uint64) are declared by annotation, which
# TVMScript's parser turns into variables and Python's linters see as undefined names
from __future__ import annotations

from ._fuse import tile_macro
from ._hopper_blockscale import promotion, scales_len
from ._hopper_epilogue import tma_boxes
from ._hopper_layout import CLUSTER_MASK, SWIZZLE, WGMMA_TYPES, transpose_flags
from ._hopper_plan import Operands, Plan, TirxKernel
from ._hopper_ring import ring_walk

__all__ = ["Operands", "Plan", "TirxKernel", "device_body"]


def device_body(p: Plan, ops: Operands):
    """The device code (everything after ``T.device_entry()``), as a TIRx macro of (A_map,
    B_map, out, out_map, scale_a, scale_b, bias): the tensor maps of A and B, the output buffer,
    its tensor map for the tma epilogue (else None), the per-tensor scales, one-element fp32
    buffers (fp8 operands, ``Plan.scaled``; else None), and the fused epilogue's bias vector
    (``Plan.fuse`` with a bias; else None)."""
    from tvm.script import tirx as T

    # KB: the k blocks of a unit (a tile, or its k slice with split K, from k block k0)
    BM, BN, BK, S, NC, KB = p.BM, p.BN, p.BK, p.S, p.NC, p.KB
    CM, CN, CS, grid, clusters, units = p.CM, p.CN, p.CS, p.grid, p.clusters, p.units
    split, pingpong, inflight, step, seq = p.split, p.pingpong, p.inflight, p.step, not p.pingpong
    WM, atoms, half_n, threads = p.WM, p.atoms, p.half_n, p.threads
    tma_store, stage_bytes, a_box, b_box = p.tma_store, p.stage_bytes, p.a_box, p.b_box
    size, KW = p.in_size, p.wgmma_k
    assert CN == 1 or (ops.a_rank == 2 and ops.a_offsets is None), \
        "A's multicast half is rows of a 2-D tiled map"
    swz = SWIZZLE[BK * size]
    sbo = 8 * BK * size // 16  # descriptor: bytes between 8-row core matrices, in 16-byte units
    tile, k0, a_coords, it0 = p.tile, p.k0, ops.a_coords, p.it0  # it0: the walk's k blocks
    store_box, store_rows = ops.store_box, ops.store_rows
    stage, reduce, meet = ops.split_cluster or (None, None, None)  # split_reduce "cluster"
    boxes = tma_boxes(p, store_box) if tma_store else store_box  # the tma epilogue's macro
    tail = ops.tail  # tail_split: the last round's k slices (_hopper_tail.Tail), or None

    ta, tb = WGMMA_TYPES[p.in_dtype], WGMMA_TYPES[p.b_dtype]
    mma = f"wgmma.mma_async.sync.aligned.m64n{BN}k{KW}.f32.{ta}.{tb}"
    trans = transpose_flags(p.in_dtype)  # (0, 0): K-major 16-bit operands; fp8 has none
    scaled, block = p.scaled, p.block_scaled
    if block:  # fp8 block scales: a fresh tile a k block, promoted (_hopper_blockscale)
        zero_acc, fetch, promote = promotion(p)  # fetch: the scales
    if p.fuse is not None:  # bias and activation on the accumulators
        fuse_tile = tile_macro(p.fuse, BN, atoms, p.N)
    tma_load = "cp.async.bulk.tensor.{}d.shared::cluster.global.mbarrier::complete_tx::bytes"
    tma, tma_a, tma_b = (tma_load.format(r) for r in (2, ops.a_rank, ops.b_rank))  # A: or im2col
    b_coords, k_count = ops.b_coords or (lambda kb, tm, bn0: (kb * BK, bn0)), ops.k_count
    assert (ops.b_coords is None or CM == 1) and (k_count is None or p.splits == 1), "CM, split"
    a_offsets = ops.a_offsets
    if a_offsets is not None:  # A's map is an im2col map: the load names the mode, offsets last
        tma_a = tma_a.replace(".global.", ".global.im2col.")
    tma_mc = tma + ".multicast::cluster"

    def a_half(kb, tm, rank):  # 1x2: this CTA's half of A's box, rows rank x a_box..
        *inner, row = a_coords(kb, tm)
        return (*inner, row + rank * a_box)

    def sm(s, r, col):  # element (row r, column col) of stage s in the ring
        return (s * (BM + BN) + r) * BK + col

    def accumulate(kb, kk):  # wgmma's scale_d: add to the tile's sums (else start them)
        return kk > 0 if block else T.Or(kb > 0, kk > 0)

    def acc_list(buf, a):
        return [buf[a * half_n + i] for i in range(half_n)]

    at_ring, before, start_ring, step_ring = ring_walk(S)  # the ring's position: _hopper_ring

    @T.macro
    def release(empty, stage, when, lt):
        """Consumer thread ``lt`` frees ``stage`` (if ``when``): thread 0 arrives on its CTA's
        empty barrier, or with a cluster thread r on rank r's, through the barrier's
        shared::cluster address (mapa)."""
        if CS == 1:
            if when and lt == 0:
                T.ptx.mbarrier.arrive.shared.b64(T.address_of(empty[stage]))
        elif when and lt < CS:
            peer = T.alloc_buffer((1,), "uint32", scope="local")
            T.ptx.mapa.shared__cluster.u32(
                peer[0], T.cuda.cvta_generic_to_shared(T.address_of(empty[stage])), T.uint32(lt))
            # CTA-scoped (the default .release.cta), as CUTLASS's ClusterBarrier::arrive:
            # the stage's wgmma reads are done (waited for), nothing else needs ordering.
            # With .release.cluster here and .acquire.cluster in the producer's wait, every
            # cluster kernel ran 20-26% slower than its 1x1 twin (ncu: tensor pipe 58% busy
            # against 86%); CTA-scoped, they tie (H200, hopper/cluster_scope_*_h200.txt)
            T.ptx.mbarrier.arrive.shared__cluster.b64(peer[0])

    @T.macro
    def body(A_map, B_map, out, out_map, scale_a, scale_b, bias=None):
        if p.launch_cluster > 1:
            # declares the cluster: TVM's host code launches the kernel with cluster dims (CS,
            # 1, 1), its clusterCtaIdx.x extent (cuLaunchKernelEx), as the runner does (with
            # split_reduce "cluster": a tile's split_k k slices)
            T.cta_id_in_cluster([p.launch_cluster])
        cta = T.cta_id([grid])
        # the CTA's rank in its cluster: %cluster_ctarank is blockIdx.x % CS for a 1-D cluster
        # of a 1-D grid; the remainder (unlike the special register, read by a volatile asm at
        # every use) is plain arithmetic the compiler shares
        rank = T.meta_var(cta % CS if CS > 1 else 0)
        cl = T.meta_var(cta // CS)  # this CTA's cluster
        n_tiles = T.meta_var((units // CS - cl + clusters - 1) // clusters)  # its walk's length
        tx = T.thread_id([threads])
        if tail is not None:  # its flags and functions, declared in the CUDA source
            T.attr(0, "pragma_import_c", tail.prelude)
        # one dynamic allocation (TIRx allows one): stage s holds A's BM rows, then B's BN rows
        # (sm(s, r, col)); after the ring, the tma epilogue's staging boxes (output elements
        # stored over the operands' type: indices in its units)
        Sm = T.alloc_buffer((p.dynamic_smem // size,), p.in_dtype, scope="shared.dyn",
                            align=1024)
        full = T.alloc_buffer((S,), "uint64", scope="shared", align=8)
        empty = T.alloc_buffer((S,), "uint64", scope="shared", align=8)
        # ping-pong: turn[w] completes when the other consumer ends a main loop, so w's loop
        # starts after it (see the consumers' loop)
        turn = T.alloc_buffer((2,), "uint64", scope="shared", align=8)
        acc = T.alloc_buffer((atoms * half_n,), "float32", scope="local")
        if block:  # a k block's fresh tile, and the thread's scales of it
            part = T.alloc_buffer((atoms * half_n,), "float32", scope="local")
            sv = T.alloc_buffer((scales_len(p),), "float32", scope="local")
        desc_a: T.uint64
        desc_b: T.uint64
        wg = tx // 128
        if tx == 0:
            for s in T.unroll(S):
                T.ptx.mbarrier.init.shared.b64(T.address_of(full[s]), T.uint32(1))
                # a stage is free once every consumer that reads it, in every CTA of the cluster
                # (its producer writes it there too), has released it
                T.ptx.mbarrier.init.shared.b64(T.address_of(empty[s]),
                                               T.uint32((1 if pingpong else NC) * CS))
            for w in T.unroll(2):
                T.ptx.mbarrier.init.shared.b64(T.address_of(turn[w]), T.uint32(1))
            if CS > 1:  # the inits visible to the cluster before the peer's first remote use
                T.ptx.fence.mbarrier_init.release.cluster()
        T.ptx.fence.proxy.async_.shared__cta()
        if CS > 1:
            T.cuda.cluster_sync()
        else:
            T.cuda.cta_sync()
        if wg == 0:
            if split is not None:
                T.ptx.setmaxnreg.dec.sync.aligned.u32(split[0])
            if tx == 0:
                pos = T.alloc_buffer((2,), "int32", scope="local")  # the ring's position
                start_ring(pos)
                for i in T.serial(n_tiles):
                    u = T.meta_var(cl + i * clusters)  # the unit
                    tm = T.meta_var(tile(u, rank)[0])
                    bn0 = T.meta_var(tile(u, rank)[2])
                    kf = T.meta_var(k0(u))  # the unit's first k block
                    # a cluster's producer keeps its k loop rolled: unrolled (a short constant KT,
                    # a ring of 6 stages) its addresses outgrow the setmaxnreg.dec count and ptxas
                    # spills (1000 x 1024 x 1000, 128 x 128 tiles, 6 stages: 156 bytes; a
                    # split_reduce cluster's 128 x 256, split 2, 4 stages: 16 bytes)
                    live_p = T.meta_var(p.unit_k(u) if k_count is None else k_count(tm))
                    for kb in T.serial(live_p, unroll=False if p.launch_cluster > 1 else None):
                        it = T.meta_var(it0(i) + kb)  # k blocks this CTA loaded before
                        s = T.meta_var(at_ring(it, pos)[0])
                        # parity of the stage's previous release (the first pass finds every
                        # stage free), by the peer's consumers too with a cluster (remote
                        # arrives); a CTA-scoped wait, as CUTLASS's producer's
                        T.cuda.mbarrier_wait(T.address_of(empty[s]), at_ring(it, pos)[1] ^ 1)
                        # the whole stage arrives here, the peer's half of a shared tile too
                        T.ptx.mbarrier.arrive.expect_tx.shared.b64(T.address_of(full[s]),
                                                                   T.uint32(stage_bytes))
                        if CN > 1:  # 1x2: this CTA's half of A, to both CTAs' stage s
                            T.ptx[tma_mc](T.address_of(Sm[sm(s, rank * a_box, 0)]),
                                          T.address_of(A_map), *a_half(kf + kb, tm, rank),
                                          T.address_of(full[s]), CLUSTER_MASK)
                        elif a_offsets is None:
                            T.ptx[tma_a](T.address_of(Sm[sm(s, 0, 0)]), T.address_of(A_map),
                                         *a_coords(kf + kb, tm), T.address_of(full[s]))
                        else:
                            T.ptx[tma_a](T.address_of(Sm[sm(s, 0, 0)]), T.address_of(A_map),
                                         *a_coords(kf + kb, tm), T.address_of(full[s]),
                                         *a_offsets(kf + kb))
                        if CM > 1:  # 2x1: this CTA's half of B, to both CTAs' stage s
                            T.ptx[tma_mc](T.address_of(Sm[sm(s, BM + rank * b_box, 0)]),
                                          T.address_of(B_map), (kf + kb) * BK,
                                          bn0 + rank * b_box,
                                          T.address_of(full[s]), CLUSTER_MASK)
                        else:  # B's box: a 2-D map's, or Operands.b_coords'
                            T.ptx[tma_b](T.address_of(Sm[sm(s, BM, 0)]), T.address_of(B_map),
                                         *b_coords(kf + kb, tm, bn0), T.address_of(full[s]))
                        step_ring(pos)
                    if k_count is not None:  # skipped k blocks: each stage completes empty
                        for kb in T.serial(live_p, KB):
                            it = T.meta_var(it0(i) + kb)
                            s = T.meta_var(at_ring(it, pos)[0])
                            T.cuda.mbarrier_wait(T.address_of(empty[s]), at_ring(it, pos)[1] ^ 1)
                            T.ptx.mbarrier.arrive.shared.b64(T.address_of(full[s]))
                            step_ring(pos)
            if meet is not None:  # the producer warpgroup meets the cluster's two barriers
                meet()
        else:
            if split is not None:
                T.ptx.setmaxnreg.inc.sync.aligned.u32(split[1])
            cw = T.meta_var(wg - 1)
            lt = T.meta_var(tx % 128)
            row0 = T.meta_var(0 if pingpong else cw * WM)  # this consumer's rows of a tile
            cpos = T.alloc_buffer((2,), "int32", scope="local")  # unused by ping-pong's turns
            start_ring(cpos)
            if scaled:  # sc[0]: the scales' product, read once
                sc = T.alloc_buffer((1,), "float32", scope="local")
                sc[0] = scale_a[0] * scale_b[0]
            # cooperative: every consumer takes every tile; ping-pong: consumer cw every NC-th,
            # so one's epilogue overlaps another's main loop
            for j in T.serial((n_tiles - (cw if pingpong else 0) + step - 1) // step):
                i = T.meta_var(j * step + (cw if pingpong else 0))
                u = T.meta_var(cl + i * clusters)  # the unit
                tm = T.meta_var(tile(u, rank)[0])
                tn = T.meta_var(tile(u, rank)[1])
                if tail is not None:  # slice 0 of a last-round tile zeroes it first
                    tail.zero(out, acc, u, tm, tn, row0, cw, lt)
                if pingpong:  # noqa: SIM102 - a static test outside, a TIR test inside
                    # mbarrier waits test a phase's parity, so a consumer may run at most one
                    # phase ahead of a barrier: taking turns keeps the other consumer's k blocks
                    # from being seen as this one's. Consumer 0's j-th tile (after the first)
                    # follows consumer 1's (j-1)-th, consumer 1's j-th follows consumer 0's j-th.
                    if i > 0:
                        T.cuda.mbarrier_wait(T.address_of(turn[cw]), (j - 1 + cw) & 1)
                if block:
                    zero_acc(acc)
                # the unit's k blocks (then skipped ones)
                live = T.meta_var(p.unit_k(u) if k_count is None else k_count(tm))
                for kb in T.serial(live):  # (a fresh sum: scale_d 0 first)
                    it = T.meta_var(it0(i) + kb)
                    s = T.meta_var(at_ring(it, cpos, seq)[0])
                    T.cuda.mbarrier_wait(T.address_of(full[s]), at_ring(it, cpos, seq)[1])
                    T.ptx.wgmma.fence.sync.aligned()
                    for kk in T.unroll(BK // KW):
                        T.cuda.wgmma.encode_matrix_descriptor(
                            T.address_of(desc_b), T.address_of(Sm[sm(s, BM, kk * KW)]), 1, sbo, swz)
                        for a in T.unroll(atoms):
                            T.cuda.wgmma.encode_matrix_descriptor(
                                T.address_of(desc_a),
                                T.address_of(Sm[sm(s, row0 + a * 64, kk * KW)]), 1, sbo, swz)
                            T.ptx[mma](*acc_list(part if block else acc, a), desc_a, desc_b,
                                       T.ptx.pred(accumulate(kb, kk)), 1, 1, *trans)
                    T.ptx.wgmma.commit_group.sync.aligned()
                    if block:  # this k block's scales, loaded while its wgmmas run
                        fetch(sv, scale_a, scale_b, tm, tn, k0(u) + kb, row0, lt)
                    if inflight == 0:
                        T.ptx.wgmma.wait_group.sync.aligned(0)
                        release(empty, s, True, lt)
                        if block:
                            promote(acc, part, sv, tn)
                    else:
                        # the newest group may still read stage s: free the one before it
                        T.ptx.wgmma.wait_group.sync.aligned(1)
                        release(empty, before(it, cpos, seq), kb > 0, lt)
                    step_ring(cpos, seq)
                if inflight == 1:
                    T.ptx.wgmma.wait_group.sync.aligned(0)
                    release(empty, before(it0(i) + live, cpos, seq), True, lt)
                if k_count is not None:
                    for kb in T.serial(live, KB):  # skipped: each stage arrived empty
                        it = T.meta_var(it0(i) + kb)
                        s = T.meta_var(at_ring(it, cpos, seq)[0])
                        T.cuda.mbarrier_wait(T.address_of(full[s]), at_ring(it, cpos, seq)[1])
                        release(empty, s, True, lt)
                        step_ring(cpos, seq)
                if pingpong and lt == 0:
                    T.ptx.mbarrier.arrive.shared.b64(T.address_of(turn[1 - cw]))
                if scaled:
                    # per-tensor scales, once a tile, in fp32 before the output's rounding
                    # (torch._scaled_mm's order); every wgmma group is complete here, and the
                    # next tile's first wgmma overwrites the accumulators (scale_d 0)
                    for v in T.unroll(atoms * half_n):
                        acc[v] = acc[v] * sc[0]
                if p.fuse is not None and stage is None:  # the bias, the activation (fp32;
                    fuse_tile(acc, bias, tn, lt)  # split_reduce cluster: on the sum, in reduce)
                # wgmma's m64nNk16 f32 fragment: thread lt holds rows lt/32*16 + lt%32/4 (+8),
                # columns 8 j + 2 (lt % 4) (+1)
                if tail is not None:  # a k slice of the last round's tiles: adds after zeroing
                    tail.wait(u, cw, lt)
                if tma_store and tail is None:  # box by box through shared memory
                    boxes(Sm, out_map, acc, tm, tn, row0, cw, lt)
                elif tma_store:
                    tail.boxes(Sm, out_map, acc, u, tm, tn, row0, cw, lt)
                elif stage is not None:  # split_reduce cluster: the sums to the staging
                    stage(Sm, acc, row0, lt)
                elif tail is None:
                    store_rows(out, acc, tm, tn, row0, lt)
                else:
                    tail.store_rows(out, acc, u, tm, tn, row0, lt)
            if tma_store and lt == 0:
                # the last boxes' stores must finish before the CTA (and its shared memory) ends
                T.ptx["cp.async.bulk.wait_group"](0)
            if reduce is not None:  # the consumers' reduce-scatter between the two barriers
                reduce(Sm, out, bias, cta, tx - 128)
        if CS > 1:
            # no CTA of the cluster exits while its peer may still arrive on its barriers (the
            # peer consumers' last releases) or read what it multicast: every thread of both
            # CTAs meets here last (CUTLASS's producer "load tail", a wait for every stage's
            # last release, would do it too)
            T.cuda.cluster_sync()

    return body
