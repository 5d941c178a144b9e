//! Pass one (see [`super`]): what the files that name actors, nodes and times say,
//! read before any file is parsed. [`pass_one`] reads them in order on one thread;
//! [`pass_one_parallel`] on many, each file into a correlator of its own, put
//! together in file order ([`Correlator::absorb`]) so the result is the same.

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;

use raylog_parsers::{Correlator, FileMeta, Id, Timestamp};

use super::archive::{self, ArchiveFacts};
use super::flow::{InOrder, Permits};
use super::{meta_of, open, ScanConfig, ScanReport};
use crate::discover::{Discovered, Origin};
use crate::lines::for_each_line_chunk;
use crate::prescan::{prescan_bytes, prescan_limit, wanted_by_prescan, Prescanned};

/// What pass one learned, for pass two (serial or [`parallel`]).
pub struct PassOne {
    pub corr: Correlator,
    /// Each logs dir's node id.
    pub nodes: Vec<Option<Id>>,
    /// Each file's time hint.
    pub hints: Vec<Option<Timestamp>>,
    pub metas: Vec<FileMeta>,
    pub archive_facts: ArchiveFacts,
}

/// Pass one over `disc`: correlation, node ids and time hints. Archives that cannot
/// be read are reported in `report`.
pub fn pass_one(disc: &Discovered, cfg: &ScanConfig, report: &mut ScanReport) -> PassOne {
    let mut corr = Correlator::with_zone(cfg.opts.zone.clone());
    let mut nodes: Vec<Option<Id>> = vec![None; disc.dirs.len()];
    let mut hints: Vec<Option<Timestamp>> = vec![None; disc.files.len()];
    let metas: Vec<FileMeta> = disc.files.iter().map(|f| meta_of(disc, f, cfg)).collect();
    for (i, (f, meta)) in disc.files.iter().zip(&metas).enumerate() {
        if !wanted_by_prescan(meta) || f.origin == Origin::Stdin {
            continue;
        }
        if let Ok(r) = open(&f.origin) {
            let mut found = Prescanned { node: nodes[f.dir], ..Prescanned::default() };
            let _ = for_each_line_chunk(r.take(prescan_limit(meta)), |c| prescan_bytes(meta, c, &mut corr, &mut found));
            (nodes[f.dir], hints[i]) = (found.node, found.time_hint);
        }
    }
    let mut archive_facts = ArchiveFacts::default();
    for a in &disc.archives {
        if let Err(e) = archive::prescan(a, &mut corr, &mut archive_facts) {
            report.failures.push((a.path.display().to_string(), e.to_string()));
        }
    }
    PassOne { corr, nodes, hints, metas, archive_facts }
}

/// What one file or archive of pass one said.
enum Found {
    File(usize, Correlator, Prescanned),
    Archive(Correlator, ArchiveFacts),
    Failed(String, String),
    Nothing,
}

/// [`pass_one`] on `threads` threads, with the same result.
pub fn pass_one_parallel(disc: &Discovered, cfg: &ScanConfig, threads: usize, report: &mut ScanReport) -> PassOne {
    let metas: Vec<FileMeta> = disc.files.iter().map(|f| meta_of(disc, f, cfg)).collect();
    let files: Vec<usize> = (0..disc.files.len())
        .filter(|&i| wanted_by_prescan(&metas[i]) && disc.files[i].origin != Origin::Stdin)
        .collect();
    let jobs = files.len() + disc.archives.len();
    let (next, permits) = (AtomicUsize::new(0), Permits::new(threads * 64));
    let (tx, rx) = channel::<(usize, Found)>();
    let mut one = PassOne {
        corr: Correlator::with_zone(cfg.opts.zone.clone()),
        nodes: vec![None; disc.dirs.len()],
        hints: vec![None; disc.files.len()],
        metas: Vec::new(),
        archive_facts: ArchiveFacts::default(),
    };
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (tx, next, permits, files, metas) = (tx.clone(), &next, &permits, &files, &metas);
            s.spawn(move || loop {
                if !permits.take() {
                    return;
                }
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= jobs {
                    permits.give();
                    return;
                }
                let found = match files.get(k) {
                    Some(&i) => prescan_file(disc, cfg, i, &metas[i]),
                    None => prescan_archive(cfg, &disc.archives[k - files.len()]),
                };
                if tx.send((k, found)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut order = InOrder::default();
        for (k, found) in rx {
            order.put(k, found, |found| {
                one.add(disc, found, report);
                permits.give();
            });
        }
    });
    one.metas = metas;
    one
}

impl PassOne {
    /// Takes in the next file's or archive's findings, in order.
    fn add(&mut self, disc: &Discovered, found: Found, report: &mut ScanReport) {
        match found {
            Found::File(i, corr, p) => {
                self.corr.absorb(&corr);
                let dir = disc.files[i].dir;
                self.nodes[dir] = self.nodes[dir].or(p.node);
                self.hints[i] = p.time_hint;
            }
            Found::Archive(corr, facts) => {
                self.corr.absorb(&corr);
                self.archive_facts.nodes.extend(facts.nodes);
                self.archive_facts.hints.extend(facts.hints);
            }
            Found::Failed(path, why) => report.failures.push((path, why)),
            Found::Nothing => {}
        }
    }
}

fn prescan_file(disc: &Discovered, cfg: &ScanConfig, i: usize, meta: &FileMeta) -> Found {
    let Ok(r) = open(&disc.files[i].origin) else { return Found::Nothing };
    let mut corr = Correlator::with_zone(cfg.opts.zone.clone());
    let mut found = Prescanned::default();
    let _ = for_each_line_chunk(r.take(prescan_limit(meta)), |c| prescan_bytes(meta, c, &mut corr, &mut found));
    Found::File(i, corr, found)
}

fn prescan_archive(cfg: &ScanConfig, a: &crate::discover::Archive) -> Found {
    let mut corr = Correlator::with_zone(cfg.opts.zone.clone());
    let mut facts = ArchiveFacts::default();
    match archive::prescan(a, &mut corr, &mut facts) {
        Ok(()) => Found::Archive(corr, facts),
        Err(e) => Found::Failed(a.path.display().to_string(), e.to_string()),
    }
}
