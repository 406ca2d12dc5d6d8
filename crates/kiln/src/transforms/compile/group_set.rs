//! A set of group numbers as a bitset: fusion keeps one per tape node (the groups it depends on),
//! and a union of two is a few word operations rather than a tree insertion per member, which
//! keeps grouping fast on graphs of thousands of nodes (eager fusion plans at every `eval`).

/// Group numbers, one bit each.
#[derive(Clone, Debug, Default)]
pub(crate) struct GroupSet {
    words: Vec<u64>,
}

impl GroupSet {
    /// Adds group `g`.
    pub(crate) fn insert(&mut self, g: usize) {
        let w = g / 64;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (g % 64);
    }

    /// Whether group `g` is in the set.
    pub(crate) fn contains(&self, g: usize) -> bool {
        self.words.get(g / 64).is_some_and(|w| w & (1 << (g % 64)) != 0)
    }

    /// Adds every group of `other`.
    pub(crate) fn union_with(&mut self, other: &GroupSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GroupSet;

    #[test]
    fn holds_exactly_the_groups_inserted_and_united() {
        let mut a = GroupSet::default();
        a.insert(3);
        a.insert(130);
        let mut b = GroupSet::default();
        b.insert(64);
        b.union_with(&a);
        let members: Vec<usize> = (0..200).filter(|&g| b.contains(g)).collect();
        assert_eq!(members, vec![3, 64, 130]);
        assert!(!a.contains(64) && !GroupSet::default().contains(0));
    }
}
