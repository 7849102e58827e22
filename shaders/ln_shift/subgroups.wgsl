// `ln_shift` with subgroups: the entry point takes the subgroup builtins, and the
// workgroup sum is subgroup sums, then the subgroups' partial sums through workgroup
// memory.

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_invocation_id) sgid: u32, @builtin(subgroup_size) sgs: u32) {
    ln_shift(wid, nwg, li, sgid, sgs);
}

var<workgroup> part: array<vec4<f32>, 256>;

// Sum of `v` over the workgroup's WG invocations; every invocation must call it.
fn wg_sum(v: vec4<f32>, li: u32, sgid: u32, sgs: u32) -> vec4<f32> {
    let s = subgroupAdd(v);
    if (sgid == 0u) {
        part[li / sgs] = s;
    }
    workgroupBarrier();
    var t = vec4<f32>(0.0);
    for (var i = 0u; i < WG / sgs; i++) {
        t += part[i];
    }
    workgroupBarrier();
    return t;
}
