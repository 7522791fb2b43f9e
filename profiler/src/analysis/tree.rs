//! The call tree of an outcome's attempts, rooted at the syscall: each function's inclusive
//! time (with its callees) and self time per attempt, with 95% intervals. A function that
//! mostly calls others (`do_open_execat`) is invisible in a list of innermost functions; here
//! it holds its callees. Built from kernel stacks in sampled mode ([`SampledTree`]) and from
//! probe nesting in exact mode ([`ExactTree`]); nodes under a share of the root are folded
//! into one line per parent.
use foldhash::{HashMap, HashMapExt as _};

use serde::Serialize;

use super::{
    stats::wilson,
    stats::{Interval, Moments},
};

/// Nodes whose inclusive time is under this share of the root are folded.
pub const COLLAPSE_BELOW: f64 = 0.01;

/// Frames of the syscall entry itself, above the syscall's own function: the tree starts
/// below them.
pub const ENTRY_FRAMES: &[&str] = &[
    // x86_64
    "entry_SYSCALL_64",
    "entry_SYSCALL_64_after_hwframe",
    "do_syscall_64",
    "x64_sys_call",
    // arm64 (arch/arm64/kernel/entry-common.c, syscall.c), native and AArch32
    "el0t_64_sync",
    "el0t_64_sync_handler",
    "el0_svc",
    "do_el0_svc",
    "el0t_32_sync",
    "el0t_32_sync_handler",
    "el0_svc_compat",
    "do_el0_svc_compat",
    "el0_svc_common",
    "el0_svc_common.constprop.0",
    "invoke_syscall",
    "invoke_syscall.constprop.0",
];

/// One node of a call tree rooted at the syscall; times in ns per attempt with 95% intervals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct TreeNode {
    /// The kernel function (the root: the attempt itself, e.g. `success attempt`).
    pub function: String,
    /// Per attempt, callees included.
    pub inclusive: Interval,
    /// Per attempt, in the function itself (sampled: samples with it innermost; exact: time
    /// outside its probed callees).
    #[serde(rename = "self")]
    pub own: Interval,
    /// Samples under it (sampled mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Largest first; folded nodes last, as one `[N callees under 1%]` node.
    pub children: Vec<TreeNode>,
}

impl TreeNode {
    /// Every node, depth first, with its depth.
    pub fn walk(&self) -> Vec<(usize, &TreeNode)> {
        let mut out = Vec::new();
        let mut stack = vec![(0, self)];
        while let Some((depth, n)) = stack.pop() {
            out.push((depth, n));
            stack.extend(n.children.iter().rev().map(|c| (depth + 1, c)));
        }
        out
    }
}

/// The exact tree's node for its attempts' time off-CPU (no kernel function has parentheses
/// in its name).
pub const OFF_CPU_NODE: &str = "(off-CPU)";

fn folded_name(n: usize) -> String {
    format!("[{n} {} under {:.0}%]", if n == 1 { "callee" } else { "callees" }, COLLAPSE_BELOW * 100.0)
}

/// Sample counts per call path, folded into a tree at the end.
#[derive(Clone, Debug, Default)]
struct Trie {
    inclusive: u64,
    own: u64,
    children: HashMap<String, Trie>,
}

/// Kernel stacks of one outcome's samples.
#[derive(Clone, Debug, Default)]
pub struct SampledTree {
    trie: Trie,
}

impl SampledTree {
    /// One distinct stack (leaf first, as sampled) seen `n` times.
    pub fn add<S: AsRef<str>>(&mut self, leaf_first: &[S], n: u64) {
        let root_first: Vec<&str> = leaf_first.iter().rev().map(AsRef::as_ref).collect();
        let start = root_first.iter().position(|f| !ENTRY_FRAMES.contains(f)).unwrap_or(root_first.len());
        let mut node = &mut self.trie;
        node.inclusive += n;
        for f in &root_first[start..] {
            node = node.children.entry((*f).to_owned()).or_default();
            node.inclusive += n;
        }
        node.own += n;
    }

    /// The tree with times per attempt: share of the outcome's samples (Wilson 95%) × its mean.
    pub fn finish(self, root: &str, mean_ns: f64) -> TreeNode {
        let total = self.trie.inclusive;
        let est = |k: u64| {
            let (lo, hi) = wilson(k, total);
            let share = if total == 0 { 0.0 } else { k as f64 / total as f64 };
            Interval { value: share * mean_ns, low: lo * mean_ns, high: hi * mean_ns }
        };
        fn build(name: String, t: Trie, total: u64, est: &dyn Fn(u64) -> Interval) -> TreeNode {
            let mut children: Vec<(String, Trie)> = t.children.into_iter().collect();
            children.sort_by(|a, b| b.1.inclusive.cmp(&a.1.inclusive).then(a.0.cmp(&b.0)));
            let (keep, fold): (Vec<_>, Vec<_>) =
                children.into_iter().partition(|(_, c)| c.inclusive as f64 >= COLLAPSE_BELOW * total as f64);
            let mut nodes: Vec<TreeNode> = keep.into_iter().map(|(n, c)| build(n, c, total, est)).collect();
            if !fold.is_empty() {
                let k: u64 = fold.iter().map(|(_, c)| c.inclusive).sum();
                nodes.push(TreeNode {
                    function: folded_name(fold.len()),
                    inclusive: est(k),
                    own: Interval::default(),
                    samples: Some(k),
                    children: Vec::new(),
                });
            }
            TreeNode { function: name, inclusive: est(t.inclusive), own: est(t.own), samples: Some(t.inclusive), children: nodes }
        }
        let mut root = build(root.to_owned(), self.trie, total, &est);
        // The root is the measured mean itself, not an estimate from samples.
        root.inclusive = Interval { value: mean_ns, low: mean_ns, high: mean_ns };
        root
    }
}

/// Calls by their caller's path: (path, inclusive, self) per attempt.
type ByParent = HashMap<Vec<u32>, Vec<(Vec<u32>, Interval, Interval)>>;

/// Per call path (probed slots, outermost first): per attempt, inclusive and self time. The
/// paths are nodes of a tree, so a call finds its path from its caller's node without building
/// it; an attempt's calls are summed per node, then added once per attempt.
#[derive(Clone, Debug)]
pub struct ExactTree {
    nodes: Vec<ExactNode>,
    /// Nodes given time in the attempt being folded.
    touched: Vec<usize>,
}

#[derive(Clone, Debug, Default)]
struct ExactNode {
    slot: u32,
    parent: usize,
    /// (slot, node) of its callees.
    children: Vec<(u32, usize)>,
    inclusive: Moments,
    own: Moments,
    /// The attempt being folded: (inclusive, self) summed over its calls on this path.
    attempt: Option<(u64, u64)>,
}

impl Default for ExactTree {
    fn default() -> Self {
        Self { nodes: vec![ExactNode::default()], touched: Vec::new() }
    }
}

impl ExactTree {
    /// The syscall itself: the node above the outermost probed calls.
    pub const ROOT: usize = 0;

    /// The node of `slot` called from `parent`'s path.
    pub fn node(&mut self, parent: usize, slot: u32) -> usize {
        if let Some(&(_, n)) = self.nodes[parent].children.iter().find(|(s, _)| *s == slot) {
            return n;
        }
        let n = self.nodes.len();
        self.nodes.push(ExactNode { slot, parent, ..ExactNode::default() });
        self.nodes[parent].children.push((slot, n));
        n
    }

    /// One call on `node`'s path in the attempt being folded; a path may repeat.
    pub fn add(&mut self, node: usize, inclusive_ns: u64, self_ns: u64) {
        let n = &mut self.nodes[node];
        let e = n.attempt.get_or_insert_with(|| {
            self.touched.push(node);
            (0, 0)
        });
        e.0 += inclusive_ns;
        e.1 += self_ns;
    }

    /// Ends the attempt being folded: each path it had adds its sums once.
    pub fn end_attempt(&mut self) {
        for &i in &self.touched {
            let n = &mut self.nodes[i];
            if let Some((incl, own)) = n.attempt.take() {
                n.inclusive.add(incl as f64);
                n.own.add(own as f64);
            }
        }
        self.touched.clear();
    }

    /// Node `i`'s path of slots, outermost first.
    fn path(&self, mut i: usize) -> Vec<u32> {
        let mut path = Vec::new();
        while i != Self::ROOT {
            path.push(self.nodes[i].slot);
            i = self.nodes[i].parent;
        }
        path.reverse();
        path
    }

    /// The tree: the root is the outcome's measured latency, its self time what no probed
    /// function covers; `name(slot)` names a slot.
    pub fn finish(self, root: &str, attempts: u64, latency: Interval, off_cpu: Interval, name: &dyn Fn(u32) -> String) -> TreeNode {
        let mut by_parent: ByParent = HashMap::new();
        for i in 1..self.nodes.len() {
            let (mut incl, mut own) = (self.nodes[i].inclusive, self.nodes[i].own);
            if incl.n == 0 {
                continue;
            }
            let path = self.path(i);
            incl.pad_to(attempts);
            own.pad_to(attempts);
            by_parent.entry(path[..path.len() - 1].to_vec()).or_default().push((path, incl.interval(), own.interval()));
        }
        fn build(
            function: String,
            path: &[u32],
            inclusive: Interval,
            own: Interval,
            root_ns: f64,
            by_parent: &mut ByParent,
            name: &dyn Fn(u32) -> String,
        ) -> TreeNode {
            let mut kids = by_parent.remove(path).unwrap_or_default();
            kids.sort_by(|a, b| b.1.value.total_cmp(&a.1.value).then(a.0.cmp(&b.0)));
            let (keep, fold): (Vec<_>, Vec<_>) = kids.into_iter().partition(|k| k.1.value >= COLLAPSE_BELOW * root_ns);
            let mut children: Vec<TreeNode> = keep
                .into_iter()
                .map(|(p, i, o)| build(name(*p.last().expect("non-empty path")), &p, i, o, root_ns, by_parent, name))
                .collect();
            if !fold.is_empty() {
                let value = fold.iter().map(|k| k.1.value).sum();
                children.push(TreeNode {
                    function: folded_name(fold.len()),
                    inclusive: Interval { value, low: value, high: value },
                    own: Interval::default(),
                    samples: None,
                    children: Vec::new(),
                });
            }
            TreeNode { function, inclusive, own, samples: None, children }
        }
        let mut root_node = build(root.to_owned(), &[], latency, Interval::default(), latency.value, &mut by_parent, name);
        // The functions' times are on-CPU: the attempts' time off-CPU is a node of its own.
        if off_cpu.value > 0.0 {
            root_node.children.push(TreeNode {
                function: OFF_CPU_NODE.to_owned(),
                inclusive: off_cpu,
                own: off_cpu,
                samples: None,
                children: Vec::new(),
            });
        }
        let outside = latency.value - root_node.children.iter().map(|c| c.inclusive.value).sum::<f64>();
        root_node.own = Interval { value: outside, low: outside, high: outside };
        root_node
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_adds_up(n: &TreeNode) {
        let children: f64 = n.children.iter().map(|c| c.inclusive.value).sum();
        assert!(children <= n.inclusive.value + 1e-6, "{}: children {children} > {}", n.function, n.inclusive.value);
        n.children.iter().for_each(assert_adds_up);
    }

    /// An arm64 kernel's stacks start at its own entry frames (native and AArch32): the tree
    /// starts below them at the syscall's function, as on x86_64.
    #[test]
    fn arm64_entry_frames_are_left_out() {
        let mut t = SampledTree::default();
        let native = ["invoke_syscall", "el0_svc_common.constprop.0", "do_el0_svc", "el0_svc", "el0t_64_sync_handler", "el0t_64_sync"];
        let compat =
            ["invoke_syscall", "el0_svc_common.constprop.0", "do_el0_svc_compat", "el0_svc_compat", "el0t_32_sync_handler", "el0t_32_sync"];
        t.add(&[&["path_openat", "__arm64_sys_execve"][..], &native].concat(), 3);
        t.add(&[&["path_openat", "__arm64_compat_sys_execve"][..], &compat].concat(), 1);
        let root = t.finish("ENOENT attempt", 100.0);
        let mut tops: Vec<&str> = root.children.iter().map(|c| c.function.as_str()).collect();
        tops.sort_unstable();
        assert_eq!(tops, ["__arm64_compat_sys_execve", "__arm64_sys_execve"]);
    }

    #[test]
    fn sampled_tree_holds_callers_with_their_callees() {
        let mut t = SampledTree::default();
        let entry = ["do_syscall_64", "entry_SYSCALL_64_after_hwframe"];
        let walk =
            [&["link_path_walk", "path_openat", "do_filp_open", "do_open_execat", "alloc_bprm", "__x64_sys_execve"][..], &entry].concat();
        let file =
            [&["alloc_empty_file", "path_openat", "do_filp_open", "do_open_execat", "alloc_bprm", "__x64_sys_execve"][..], &entry].concat();
        let trace = [&["bpf_prog_1_sys_exit", "syscall_exit_work"][..], &entry].concat();
        t.add(&walk, 60);
        t.add(&file, 30);
        t.add(&trace, 9);
        t.add(&["strange_leaf", "do_open_execat", "alloc_bprm", "__x64_sys_execve"], 1);
        let root = t.finish("ENOENT attempt", 1_000.0);
        assert_eq!(root.inclusive.value, 1_000.0, "the root is the measured mean");
        assert_adds_up(&root);
        let sys = &root.children[0];
        assert_eq!((sys.function.as_str(), sys.samples), ("__x64_sys_execve", Some(91)));
        let open = &sys.children[0].children[0];
        assert_eq!(open.function, "do_open_execat");
        assert!((open.inclusive.value - 910.0).abs() < 1e-9, "do_open_execat holds its callees: {open:?}");
        assert!(open.own.value == 0.0 && open.inclusive.low < 910.0 && open.inclusive.high > 910.0);
        // The 1% leaf is kept (at the threshold); nothing under it here.
        assert!(root.walk().iter().any(|(_, n)| n.function == "strange_leaf"));
        assert_eq!(root.children[1].function, "syscall_exit_work");
    }

    #[test]
    fn small_nodes_fold_into_one_line() {
        let mut t = SampledTree::default();
        t.add(&["big", "__x64_sys_execve"], 995);
        for i in 0..5 {
            t.add(&[format!("tiny{i}").as_str(), "__x64_sys_execve"], 1);
        }
        let root = t.finish("r", 100.0);
        let sys = &root.children[0];
        assert_eq!(sys.children.len(), 2);
        assert_eq!(sys.children[1].function, "[5 callees under 1%]");
        assert_eq!(sys.children[1].samples, Some(5));
        assert_adds_up(&root);
    }

    #[test]
    fn exact_tree_from_nesting_adds_up_to_the_latency() {
        let mut t = ExactTree::default();
        // Two attempts: slot 0 (alloc_bprm) calls slot 1 (do_open_execat) twice in the first.
        let alloc = t.node(ExactTree::ROOT, 0);
        let open = t.node(alloc, 1);
        t.add(alloc, 800, 100);
        t.add(open, 300, 300);
        t.add(open, 400, 400);
        t.end_attempt();
        t.add(alloc, 600, 200);
        let again = t.node(alloc, 1);
        assert_eq!(again, open, "the same path is the same node");
        t.add(again, 400, 400);
        t.end_attempt();
        let names = |s: u32| ["alloc_bprm", "do_open_execat"][s as usize].to_owned();
        let root = t.finish("ENOENT attempt", 2, Interval { value: 1_000.0, low: 900.0, high: 1_100.0 }, Interval::default(), &names);
        assert_eq!(root.inclusive.value, 1_000.0);
        let alloc = &root.children[0];
        assert_eq!((alloc.function.as_str(), alloc.inclusive.value, alloc.own.value), ("alloc_bprm", 700.0, 150.0));
        assert_eq!(alloc.children[0].inclusive.value, 550.0, "both calls of the first attempt count");
        assert_eq!(root.own.value, 300.0, "outside every probed function");
        assert_adds_up(&root);
    }
}
