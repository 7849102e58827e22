// `ln_shift` without subgroups: the workgroup sum is a tree in workgroup memory (no
// subgroup builtins: the entry point passes 0 for them).

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    ln_shift(wid, nwg, li, 0u, 0u);
}

var<workgroup> part: array<vec4<f32>, 256>;

// Sum of `v` over the workgroup's WG invocations; every invocation must call it.
fn wg_sum(v: vec4<f32>, li: u32, sgid: u32, sgs: u32) -> vec4<f32> {
    part[li] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) {
            part[li] += part[li + s];
        }
        workgroupBarrier();
    }
    let t = part[0];
    workgroupBarrier();
    return t;
}
