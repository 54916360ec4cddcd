//! The whole system as one stateright [`Model`]: nodes, clients, the
//! messages between them (delivered in any order, late, or lost), time
//! that passes in steps of 1 ms, and nodes that restart empty or whose
//! clock jumps.

use stateright::{Model, Property};

use crate::algorithm::Verdict;
use crate::client::{self, Answer, Client, Phase};
use crate::node::{Broken, Node, Request, Token};

/// Which primitive the clients use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A lock.
    Lock,
    /// A lock with fencing tokens.
    FencedLock,
    /// A semaphore of this many permits: as many locks (its slots), a
    /// client trying any one of them.
    Semaphore(u8),
    /// A reader-writer lock: a client tries to write (slot 0) or to read
    /// (slot [`READ`]).
    RwLock,
}

/// The property: a lock has at most one holder whose validity has not run out.
pub const ONE_HOLDER: &str = "a lock has at most one valid holder";
/// The property: a semaphore of K has at most K such holders.
pub const K_HOLDERS: &str = "a semaphore of K has at most K valid holders";
/// The property: no writer beside a valid reader, and one writer at most.
pub const NO_WRITER_BESIDE_READERS: &str = "no writer beside a valid reader, and one writer";
/// The property: every fencing token granted is larger than those before.
pub const FENCES_GROW: &str = "fencing tokens only grow";
/// The witness that the model lets a client hold at all.
pub const SOMEONE_HOLDS: &str = "a client holds";

/// A reader-writer lock's reading "slot".
pub const READ: u8 = 1;

/// A deliberate defect, each of which a property must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// A quorum of N/2 instead of N/2 + 1.
    HalfQuorum,
    /// A release that deletes the key without comparing the token.
    ReleaseWithoutTokenCheck,
    /// A semaphore that counts permits per node instead of holding K locks.
    PerNodeSemaphore,
    /// A fenced acquisition that does not refuse a stale proposal.
    NoStaleCheck,
    /// A vote counted during its node's quarantine.
    CountQuarantined,
    /// A writer that does not look at the readers.
    WriterIgnoresReaders,
}

/// The bounds and settings of one check.
#[derive(Clone, Debug)]
pub struct Config {
    /// The nodes (3 in the checks).
    pub nodes: usize,
    /// The clients.
    pub clients: usize,
    /// What they take.
    pub kind: Kind,
    /// Rounds each client may start.
    pub attempts: u8,
    /// The TTL, in ms (model time steps).
    pub ttl: u64,
    /// The drift factor, as the crate's setting.
    pub drift_factor: f64,
    /// How long a fence value stays after its last use.
    pub fence_idle: u64,
    /// Time stops here (the state space is finite).
    pub max_time: u64,
    /// Messages the network may lose.
    pub losses: u8,
    /// Node restarts (empty, no persistence).
    pub restarts: u8,
    /// Clock jumps.
    pub jumps: u8,
    /// The deliberate defect, if any.
    pub mutation: Option<Mutation>,
}

impl Config {
    /// 3 nodes, 2 clients with 2 rounds each, a 5 ms TTL (valid for 2.95
    /// ms: three time steps), no faults.
    pub fn new(kind: Kind) -> Config {
        Config {
            nodes: 3,
            clients: 2,
            kind,
            attempts: 2,
            ttl: 5,
            drift_factor: 0.01,
            fence_idle: 3,
            max_time: 6,
            losses: 0,
            restarts: 0,
            jumps: 0,
            mutation: None,
        }
    }

    fn broken(&self) -> Broken {
        Broken {
            release_without_token_check: self.mutation == Some(Mutation::ReleaseWithoutTokenCheck),
            no_stale_check: self.mutation == Some(Mutation::NoStaleCheck),
            writer_ignores_readers: self.mutation == Some(Mutation::WriterIgnoresReaders),
            per_node_permits: match (self.mutation, self.kind) {
                (Some(Mutation::PerNodeSemaphore), Kind::Semaphore(k)) => Some(k),
                _ => None,
            },
        }
    }

    /// The restart quarantine and the clock rule's: the longest TTL.
    fn quarantine(&self) -> u64 {
        self.ttl
    }

    fn fenced(&self) -> bool {
        self.kind == Kind::FencedLock
    }
}

/// A request on its way from a client to a node. The node's answer
/// reaches the client as the node runs it ([`Action::Deliver`]), or never
/// ([`Action::DeliverUnheard`], no fault: the client decides without it).
/// An answer heard late is one not heard: a round's tally does not depend
/// on the order of its answers, its validity counts from its start, and
/// an answer after the decision is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Message {
    /// The client.
    pub client: u8,
    /// The node.
    pub node: u8,
    /// What it asks.
    pub request: Request,
}

/// Everything at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct State {
    /// Model time, in ms.
    pub now: u64,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// The clients.
    pub clients: Vec<Client>,
    /// The messages on their way, sorted (their order means nothing).
    pub net: Vec<Message>,
    /// Messages lost so far.
    pub losses: u8,
    /// Node restarts so far.
    pub restarts: u8,
    /// Clock jumps so far.
    pub jumps: u8,
    /// The largest fencing token granted so far.
    pub max_fence: Option<u64>,
    /// Whether a grant ever had a token no larger than an earlier one.
    pub fence_regressed: bool,
}

impl State {
    /// The state that stands for this one and its renumberings (see
    /// [`Representative`](stateright::Representative)): stateright's
    /// breadth-first search does not apply symmetry itself, so each next
    /// state is made canonical here.
    fn canonical(&mut self) {
        self.net.sort();
        *self = stateright::Representative::representative(self);
    }

    /// This state with its nodes renumbered by `to` (node `i` becomes node
    /// `to[i]`).
    fn renumbered(&self, to: &[u8]) -> State {
        let mut next = self.clone();
        for (i, node) in self.nodes.iter().enumerate() {
            next.nodes[usize::from(to[i])] = node.clone();
        }
        for (c, client) in next.clients.iter_mut().enumerate() {
            if let (Phase::Acquiring { answers: new, .. }, Phase::Acquiring { answers, .. }) =
                (&mut client.phase, &self.clients[c].phase)
            {
                for (i, answer) in answers.iter().enumerate() {
                    new[usize::from(to[i])] = *answer;
                }
            }
        }
        for m in &mut next.net {
            m.node = to[usize::from(m.node)];
        }
        next.net.sort();
        next
    }
}

/// The nodes are interchangeable: a state stands for all its renumberings,
/// and the checker keeps the least of them (symmetry reduction).
impl stateright::Representative for State {
    fn representative(&self) -> Self {
        let n = self.nodes.len() as u8;
        let mut best = self.clone();
        let mut to: Vec<u8> = (0..n).collect();
        permutations(&mut to, 0, &mut |to| {
            let candidate = self.renumbered(to);
            if candidate < best {
                best = candidate;
            }
        });
        best
    }
}

/// Calls `each` with every permutation of `items[from..]`.
fn permutations(items: &mut [u8], from: usize, each: &mut impl FnMut(&[u8])) {
    if from == items.len() {
        each(items);
        return;
    }
    for i in from..items.len() {
        items.swap(from, i);
        permutations(items, from + 1, each);
        items.swap(from, i);
    }
}

/// One step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// 1 ms passes.
    Tick,
    /// A client starts a round for a slot.
    Start {
        /// The client.
        client: u8,
        /// The slot it tries.
        slot: u8,
    },
    /// The network delivers a request, and the node's answer.
    Deliver(Message),
    /// The network delivers a request and loses the node's answer.
    DeliverUnheard(Message),
    /// The network loses a message.
    Lose(Message),
    /// A client stops waiting: its pending nodes count as failed.
    GiveUp(u8),
    /// A holder releases.
    Release(u8),
    /// A node restarts empty.
    Restart(u8),
    /// A node's clock jumps ahead.
    Jump(u8),
}

/// The model: a [`Config`] explored by stateright.
#[derive(Clone, Debug)]
pub struct Redlock {
    /// Its bounds and settings.
    pub config: Config,
}

impl Redlock {
    /// Holders whose validity has not run out, as `(slot, fence)`.
    fn valid_holders(&self, state: &State) -> Vec<(u8, Option<u64>)> {
        state
            .clients
            .iter()
            .filter_map(|c| c.holds_validly(state.now))
            .collect()
    }

    fn slots(&self, client: u8) -> Vec<u8> {
        match (self.config.kind, self.config.mutation) {
            (Kind::Semaphore(_), Some(Mutation::PerNodeSemaphore)) => vec![client],
            (Kind::Semaphore(k), _) => (0..k).collect(),
            (Kind::RwLock, _) => vec![0, READ],
            _ => vec![0],
        }
    }

    /// The request that releases `slot` (or a reader's hold).
    fn release(&self, slot: u8, token: Token) -> Request {
        match (self.config.kind, slot) {
            (Kind::RwLock, READ) => Request::ReadRelease { token },
            _ => Request::Release { slot, token },
        }
    }

    fn send_all(&self, state: &mut State, client: u8, request: Request) {
        for node in 0..self.config.nodes {
            state.net.push(Message {
                client,
                node: node as u8,
                request,
            });
        }
    }

    /// The client's round decided (or given up): hold, or clean up.
    fn settle(&self, state: &mut State, client: u8, give_up: bool) {
        let c = &state.clients[usize::from(client)];
        let token = c.token(client);
        let Phase::Acquiring {
            slot,
            start,
            fence,
            ref answers,
        } = c.phase
        else {
            return;
        };
        let answers = answers.clone();
        let quorum = (self.config.mutation == Some(Mutation::HalfQuorum))
            .then(|| (self.config.nodes / 2).max(1));
        let Some(verdict) = client::decide(&answers, self.config.fenced(), quorum, give_up) else {
            return;
        };
        let until = client::valid_until_us(start, self.config.ttl, self.config.drift_factor);
        if verdict == Verdict::Confirmed && state.now * 1000 < until {
            if let Some(f) = fence {
                state.fence_regressed |= state.max_fence.is_some_and(|m| f <= m);
                state.max_fence = state.max_fence.max(Some(f));
            }
            state.clients[usize::from(client)].phase = Phase::Holding {
                slot,
                valid_until_us: until,
                fence,
            };
            return;
        }
        let seen = client::stale_fence(&answers);
        let c = &mut state.clients[usize::from(client)];
        c.seen = c.seen.max(seen.unwrap_or(0));
        c.phase = Phase::Idle;
        self.send_all(state, client, self.release(slot, token));
    }

    /// The node runs the request; the client hears the answer if `heard`
    /// and it still waits for it.
    fn deliver(&self, state: &mut State, message: Message, heard: bool) {
        let Message {
            client,
            node,
            request,
        } = message;
        let n = &mut state.nodes[usize::from(node)];
        let acquisition = match request {
            Request::Acquire { token, .. }
            | Request::ReadAcquire { token, .. }
            | Request::WriteAcquire { token, .. } => Some(token),
            Request::Release { .. } | Request::ReadRelease { .. } => None,
        };
        // A node in its quarantine is sent nothing but clean-ups (judged
        // here at delivery, the earliest any client's judgement could be).
        let counts = n.counts(state.now, self.config.quarantine())
            || self.config.mutation == Some(Mutation::CountQuarantined);
        let answer = if counts || acquisition.is_none() {
            let reply = n.run(
                request,
                state.now,
                self.config.fence_idle,
                self.config.broken(),
            );
            Answer::Replied(reply)
        } else {
            Answer::Quarantined
        };
        // Nobody waits for a release's answer.
        let Some(token) = acquisition else {
            return;
        };
        let c = &mut state.clients[usize::from(client)];
        if !heard || c.attempts != token.attempt {
            return;
        }
        let Phase::Acquiring { answers, .. } = &mut c.phase else {
            return;
        };
        let slot = &mut answers[usize::from(node)];
        if *slot == Answer::Pending {
            *slot = answer;
            self.settle(state, client, false);
        }
    }
}

impl Model for Redlock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            nodes: vec![Node::default(); self.config.nodes],
            clients: vec![Client::new(); self.config.clients],
            net: Vec::new(),
            losses: 0,
            restarts: 0,
            jumps: 0,
            max_fence: None,
            fence_regressed: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let cfg = &self.config;
        if state.now < cfg.max_time {
            actions.push(Action::Tick);
        }
        for (i, c) in state.clients.iter().enumerate() {
            let client = i as u8;
            match c.phase {
                Phase::Idle if c.attempts < cfg.attempts => {
                    for slot in self.slots(client) {
                        actions.push(Action::Start { client, slot });
                    }
                }
                Phase::Acquiring { .. } => actions.push(Action::GiveUp(client)),
                Phase::Holding { .. } => actions.push(Action::Release(client)),
                Phase::Idle => {}
            }
        }
        let mut seen = None;
        for m in &state.net {
            if seen == Some(m) {
                continue;
            }
            seen = Some(m);
            actions.push(Action::Deliver(*m));
            // An answer the client decided without is no fault: a slow
            // answer, which a client that stops waiting never hears.
            if !matches!(
                m.request,
                Request::Release { .. } | Request::ReadRelease { .. }
            ) {
                actions.push(Action::DeliverUnheard(*m));
            }
            if state.losses < cfg.losses {
                actions.push(Action::Lose(*m));
            }
        }
        for node in 0..cfg.nodes as u8 {
            if state.restarts < cfg.restarts {
                actions.push(Action::Restart(node));
            }
            if state.jumps < cfg.jumps {
                actions.push(Action::Jump(node));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Start { client, slot } => {
                let c = &mut state.clients[usize::from(client)];
                c.attempts += 1;
                // The crate's proposal: above every fence value seen, and
                // never below the wall clock (here model time, in µs).
                let fence = self
                    .config
                    .fenced()
                    .then(|| (state.now * 1000).max(c.seen + 1));
                c.phase = Phase::Acquiring {
                    slot,
                    start: state.now,
                    fence,
                    answers: vec![Answer::Pending; self.config.nodes],
                };
                let token = c.token(client);
                let ttl = self.config.ttl;
                let request = match (self.config.kind, slot) {
                    (Kind::RwLock, READ) => Request::ReadAcquire { token, ttl },
                    (Kind::RwLock, _) => Request::WriteAcquire { token, ttl },
                    _ => Request::Acquire {
                        slot,
                        token,
                        ttl,
                        fence,
                    },
                };
                self.send_all(&mut state, client, request);
            }
            Action::Deliver(m) | Action::DeliverUnheard(m) => {
                let at = state.net.iter().position(|x| *x == m)?;
                state.net.remove(at);
                let heard = matches!(action, Action::Deliver(_));
                self.deliver(&mut state, m, heard);
            }
            Action::Lose(m) => {
                let at = state.net.iter().position(|x| *x == m)?;
                state.net.remove(at);
                state.losses += 1;
            }
            Action::GiveUp(client) => self.settle(&mut state, client, true),
            Action::Release(client) => {
                let c = &mut state.clients[usize::from(client)];
                let Phase::Holding { slot, .. } = c.phase else {
                    return None;
                };
                let token = c.token(client);
                c.phase = Phase::Idle;
                let release = self.release(slot, token);
                self.send_all(&mut state, client, release);
            }
            Action::Restart(node) => {
                state.nodes[usize::from(node)].restart(state.now);
                state.restarts += 1;
            }
            Action::Jump(node) => {
                state.nodes[usize::from(node)].jump(state.now);
                state.jumps += 1;
            }
        }
        state.canonical();
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_HOLDER, |m: &Redlock, s: &State| {
                let holders = m.valid_holders(s);
                match m.config.kind {
                    Kind::Lock | Kind::FencedLock => holders.len() <= 1,
                    _ => true,
                }
            }),
            Property::always(K_HOLDERS, |m: &Redlock, s: &State| match m.config.kind {
                Kind::Semaphore(k) => m.valid_holders(s).len() <= usize::from(k),
                _ => true,
            }),
            Property::always(NO_WRITER_BESIDE_READERS, |m: &Redlock, s: &State| {
                let holders = m.valid_holders(s);
                let writers = holders.iter().filter(|(slot, _)| *slot != READ).count();
                m.config.kind != Kind::RwLock
                    || writers == 0
                    || (writers == 1 && holders.len() == 1)
            }),
            Property::always(FENCES_GROW, |_: &Redlock, s: &State| !s.fence_regressed),
            Property::sometimes(SOMEONE_HOLDS, |m: &Redlock, s: &State| {
                !m.valid_holders(s).is_empty()
            }),
        ]
    }
}
