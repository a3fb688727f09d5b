//! Page arithmetic of row-group files: how a file's rows are cut into granules and pages, so
//! that a row's page in any group is found by a shift.

/// Smallest and largest granule, in rows (as shifts).
pub(super) const MIN_GRANULE_SHIFT: u32 = 6;
pub(super) const MAX_GRANULE_SHIFT: u32 = 13;
/// Most rows a page may hold (as a shift): bounds the spans of narrow groups.
pub(super) const MAX_PAGE_SHIFT: u32 = 16;

/// How a file's rows are cut into pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Rows per granule, as a shift.
    pub granule_shift: u32,
    /// Granules per key page, as a shift.
    pub key_span: u32,
    /// Granules per page of each group, as shifts.
    pub spans: Vec<u32>,
}

fn floor_log2(x: usize) -> u32 {
    usize::BITS - 1 - x.max(1).leading_zeros()
}

impl Shape {
    /// The shape for pages of about `block_size` bytes, given the bytes a key page spends per
    /// row and each group's bytes per row: the widest group's (or the key pages') page is one
    /// granule (of at least 64 and at most 8,192 rows), narrower ones span as many granules as
    /// fit, but a group's page never more than a key page, so that every group's pages nest
    /// inside the key pages: a key page's rows are whole pages of every group, whose zone maps
    /// together describe exactly those rows.
    pub(crate) fn choose(block_size: usize, key_width: usize, widths: &[usize]) -> Shape {
        let widest = widths.iter().copied().chain([key_width]).max().unwrap_or(1).max(1);
        let granule_shift = floor_log2(block_size / widest).clamp(MIN_GRANULE_SHIFT, MAX_GRANULE_SHIFT);
        let span = |w: usize| floor_log2(widest / w.max(1)).min(MAX_PAGE_SHIFT.saturating_sub(granule_shift));
        let key_span = span(key_width);
        Shape { granule_shift, key_span, spans: widths.iter().map(|&w| span(w).min(key_span)).collect() }
    }

    /// Rows per key page, as a shift.
    pub(crate) fn key_shift(&self) -> u32 {
        self.granule_shift + self.key_span
    }

    /// Rows per page of group `g`, as a shift.
    pub(crate) fn page_shift(&self, g: usize) -> u32 {
        self.granule_shift + self.spans[g]
    }

    /// The page of group `g` holding ordinal `r`, and `r`'s row in it.
    #[inline]
    pub(crate) fn locate(&self, g: usize, r: u64) -> (usize, usize) {
        let s = self.page_shift(g);
        ((r >> s) as usize, (r & ((1 << s) - 1)) as usize)
    }

    /// Pages of `1 << shift` rows that `rows` rows fill.
    pub(crate) fn pages(rows: u64, shift: u32) -> usize {
        rows.div_ceil(1 << shift) as usize
    }

    /// Rows of page `p` of `1 << shift`-row pages over `rows` rows.
    pub(crate) fn rows_of(rows: u64, shift: u32, p: usize) -> usize {
        let start = (p as u64) << shift;
        (rows.saturating_sub(start)).min(1 << shift) as usize
    }
}
