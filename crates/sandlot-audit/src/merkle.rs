//! RFC 6962 Merkle tree hashing, kept as an incremental frontier: the roots of the perfect
//! subtrees of the binary decomposition of the tree size (at most 64 hashes), so an append
//! costs one leaf hash plus amortised one node hash, and the root of the whole tree is a fold
//! of the frontier. Written here rather than taken from a crate: it is twenty lines, and the
//! well-kept transparency-log crates bring whole tile/proof stacks this log does not use.

use sha2::{Digest, Sha256};

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// `SHA-256(0x00 || data)`: the hash of a leaf.
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

/// `SHA-256(0x01 || left || right)`: the hash of an interior node.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The root of the empty tree: SHA-256 of nothing.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The right edge of a Merkle tree: enough to append leaves and compute the root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// Roots of the perfect subtrees, largest (leftmost) first.
    stack: Vec<Hash>,
}

impl Frontier {
    /// The frontier of a tree of `size` leaves whose perfect subtrees have roots `stack`
    /// (largest first); `None` when their count does not match the size's bits.
    pub fn from_parts(size: u64, stack: Vec<Hash>) -> Option<Self> {
        (size.count_ones() as usize == stack.len()).then_some(Self { size, stack })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn stack(&self) -> &[Hash] {
        &self.stack
    }

    /// Appends the leaf whose hash is `leaf`.
    pub fn push(&mut self, leaf: Hash) {
        let mut h = leaf;
        let mut n = self.size;
        while n & 1 == 1 {
            let left = self.stack.pop().expect("one subtree per set bit");
            h = node_hash(&left, &h);
            n >>= 1;
        }
        self.stack.push(h);
        self.size += 1;
    }

    /// The RFC 6962 root of the tree.
    pub fn root(&self) -> Hash {
        let mut it = self.stack.iter().rev();
        let Some(last) = it.next() else {
            return empty_root();
        };
        it.fold(*last, |acc, left| node_hash(left, &acc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6962 section 2.1, literally: split at the largest power of two below n.
    fn mth(leaves: &[Vec<u8>]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaf_hash(&leaves[0]),
            n => {
                let mut k = 1;
                while k * 2 < n {
                    k *= 2;
                }
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    #[test]
    fn frontier_root_matches_the_rfc_definition_for_every_size() {
        let leaves: Vec<Vec<u8>> = (0..200u32)
            .map(|i| format!("leaf {i}").into_bytes())
            .collect();
        let mut f = Frontier::default();
        assert_eq!(f.root(), mth(&[]));
        for n in 1..=leaves.len() {
            f.push(leaf_hash(&leaves[n - 1]));
            assert_eq!(f.root(), mth(&leaves[..n]), "size {n}");
            let again = Frontier::from_parts(f.size(), f.stack().to_vec()).unwrap();
            assert_eq!(again.root(), f.root());
        }
    }

    #[test]
    fn known_answer_empty_tree() {
        assert_eq!(
            hex::encode(empty_root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
