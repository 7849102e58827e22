// Sum of one f32 per invocation over a workgroup of WG invocations (WG a power of two,
// declared by the including shader): a tree in workgroup memory. Shared by layer_norm and
// wkv_out (GroupNorm); every invocation of the workgroup must call it.
var<workgroup> red: array<f32, WG>;

fn wg_sum1(li: u32, v: f32) -> f32 {
    red[li] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) {
            red[li] += red[li + s];
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
