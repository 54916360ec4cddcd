//! The whole system as one stateright [`Model`]: nodes, clients, the
//! messages between them (delivered in any order, late, or lost), time
//! that passes in steps of 1 ms, nodes that restart empty or whose clock
//! jumps, and clients that crash.

use stateright::{Model, Property};

use crate::algorithm::Verdict;
use crate::client::{self, Answer, Client, Phase};
use crate::node::{Broken, Node, Reply, Request, Setting, Token};

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
    /// A lock whose waiters queue on the gate node (node 0): every round
    /// asks the gate node first, and goes on to the others only when the
    /// gate node grants it, or answers "held" to the first in line; a
    /// waiter asks again when woken or when its timer is due.
    QueuedLock,
}

/// The property: a lock has at most one holder whose validity has not run out.
pub const ONE_HOLDER: &str = "a lock has at most one valid holder";
/// The property: a semaphore of K has at most K such holders.
pub const K_HOLDERS: &str = "a semaphore of K has at most K valid holders";
/// The property: no writer beside a valid reader, and one writer at most.
pub const NO_WRITER_BESIDE_READERS: &str = "no writer beside a valid reader, and one writer";
/// The property: every fencing token granted is larger than those before.
pub const FENCES_GROW: &str = "fencing tokens only grow";
/// The property: from any state, once faults stop, some live client gets
/// the lock: the queue of waiters cannot wedge. Checked on one fixed
/// fault-free schedule ([`Redlock::stuck`]): messages delivered in the
/// network's (sorted) order, a round whose messages are all gone given up,
/// a lapsed holder's release, every due retry, idle clients starting a
/// call, and time passing only when nothing else is left to do.
pub const QUEUE_MOVES: &str = "when faults stop, some waiter gets the lock";
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
    /// The gate node keeps a waiter's place however long ago it last asked
    /// (a crashed waiter's place is kept forever).
    QueueWithoutAliveTimes,
    /// A waiter asks again only when woken (no timer).
    WaitWithoutTimer,
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
    /// Client crashes.
    pub crashes: u8,
    /// How long a place in the gate node's queue counts after its waiter
    /// last asked (the crate's `QUEUE_ALIVE`).
    pub alive: u64,
    /// How often a waiter asks again unwoken (its retry, or the refresh
    /// that keeps its place alive: below `alive`).
    pub refresh: u64,
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
            crashes: 0,
            alive: 3,
            refresh: 1,
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

    /// What the nodes are told besides each request: the crate's
    /// arguments in model time.
    fn setting(&self) -> Setting {
        Setting {
            fence_idle: self.fence_idle,
            permits: match self.kind {
                Kind::Semaphore(k) => Some(k),
                _ => None,
            },
            rw: self.kind == Kind::RwLock,
            // The granted round's per-node timeout: one step.
            grace: 1,
            // A refused writer's mark lives as a place in the queue does.
            mark: self.alive,
            broken: self.broken(),
        }
    }

    /// How long a node keeps a waiter's place after it last asked: `alive`,
    /// or, in the defect, for ever (beyond any check's time).
    fn node_alive(&self) -> u64 {
        match self.mutation {
            Some(Mutation::QueueWithoutAliveTimes) => u64::from(u32::MAX),
            _ => self.alive,
        }
    }

    /// The restart quarantine and the clock rule's: the longest TTL.
    fn quarantine(&self) -> u64 {
        self.ttl
    }

    fn fenced(&self) -> bool {
        self.kind == Kind::FencedLock
    }

    fn queued(&self) -> bool {
        self.kind == Kind::QueuedLock
    }
}

/// The member of a waiter that crashed while queued, before the check
/// starts (one initial state has it at the head of the queue): no client
/// hears its wake-ups.
const GHOST: u8 = u8::MAX;

/// Fault-free steps the continuation of [`QUEUE_MOVES`] may take.
const RECOVERY_STEPS: usize = 300;

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
    /// Client crashes so far.
    pub crashes: u8,
    /// Node 0 is the gate node (it is not renumbered).
    pub gated: bool,
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
        let from = usize::from(self.gated);
        permutations(&mut to, from, &mut |to| {
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
    /// A waiter asks again (woken, or its timer due).
    Retry(u8),
    /// A client's process is gone.
    Crash(u8),
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

    /// Sends the release of `slot` (or a reader's hold) to every node: a
    /// lease's, or a failed round's clean-up.
    fn release(&self, state: &mut State, client: u8, slot: u8, token: Token, lease: bool) {
        for node in 0..self.config.nodes as u8 {
            let request = match (self.config.kind, slot) {
                (Kind::RwLock, READ) => Request::ReadRelease { token },
                (Kind::QueuedLock, _) if node == 0 => Request::GateRelease { token, lease },
                _ => Request::Release { slot, token },
            };
            state.net.push(Message {
                client,
                node,
                request,
            });
        }
    }

    /// Sends `request` to the nodes from `first` on.
    fn send_from(&self, state: &mut State, client: u8, first: u8, request: Request) {
        for node in first..self.config.nodes as u8 {
            state.net.push(Message {
                client,
                node,
                request,
            });
        }
    }

    /// The client starts a round for `slot`: to every node, or, with a
    /// queue, to the gate node first.
    fn start_round(&self, state: &mut State, client: u8, slot: u8) {
        let now = state.now;
        let c = &mut state.clients[usize::from(client)];
        c.attempts = c.attempts.saturating_add(1);
        // The crate's proposal: above every fence value seen, and never
        // below the wall clock (here model time, in µs).
        let fence = self.config.fenced().then(|| (now * 1000).max(c.seen + 1));
        c.phase = Phase::Acquiring {
            slot,
            start: now,
            fence,
            answers: vec![Answer::Pending; self.config.nodes],
        };
        let token = c.token(client);
        let ttl = self.config.ttl;
        let request = match (self.config.kind, slot) {
            (Kind::RwLock, READ) => Request::ReadAcquire { token, ttl },
            (Kind::RwLock, _) => Request::WriteAcquire { token, ttl },
            (Kind::QueuedLock, _) => {
                let member = client;
                state.net.push(Message {
                    client,
                    node: 0,
                    request: Request::GateAcquire { token, ttl, member },
                });
                return;
            }
            _ => Request::Acquire {
                slot,
                token,
                ttl,
                fence,
            },
        };
        self.send_from(state, client, 0, request);
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
            // Won without the gate node's grant: it leaves the queue.
            if self.config.queued() && answers[0] != Answer::Replied(Reply::Granted) {
                state.net.push(Message {
                    client,
                    node: 0,
                    request: Request::Leave { member: client },
                });
            }
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
        let now = state.now;
        let queued = self.config.queued();
        let c = &mut state.clients[usize::from(client)];
        c.seen = c.seen.max(seen.unwrap_or(0));
        // A queued waiter waits for its turn; any other client is done.
        if queued {
            c.wait(now);
        } else {
            c.phase = Phase::Idle;
        }
        self.release(state, client, slot, token, false);
    }

    /// The node runs the request; the client hears the answer if `heard`
    /// and it still waits for it.
    fn deliver(&self, state: &mut State, message: Message, heard: bool) {
        let Message {
            client,
            node,
            request,
        } = message;
        if request == Request::Wake {
            let c = &mut state.clients[usize::from(client)];
            match &mut c.phase {
                Phase::Waiting { woken, .. } => *woken = true,
                Phase::Crashed => {}
                _ => c.woken_early = true,
            }
            return;
        }
        let n = &mut state.nodes[usize::from(node)];
        let acquisition = match request {
            Request::Acquire { token, .. }
            | Request::ReadAcquire { token, .. }
            | Request::WriteAcquire { token, .. }
            | Request::GateAcquire { token, .. } => Some(token),
            Request::Release { .. }
            | Request::ReadRelease { .. }
            | Request::GateRelease { .. }
            | Request::Leave { .. }
            | Request::Wake => None,
        };
        // A node in its quarantine is sent nothing but clean-ups (judged
        // here at delivery, the earliest any client's judgement could be).
        let counts = n.counts(state.now, self.config.quarantine())
            || self.config.mutation == Some(Mutation::CountQuarantined);
        let answer = if counts || acquisition.is_none() {
            let (reply, woken) = n.serve(request, state.now, &self.config.setting());
            // A crashed waiter's wake-up reaches nobody.
            if let Some(woken) = woken.filter(|w| usize::from(*w) < state.clients.len()) {
                state.net.push(Message {
                    client: woken,
                    node,
                    request: Request::Wake,
                });
            }
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
        if *slot != Answer::Pending {
            return;
        }
        *slot = answer;
        if let Request::GateAcquire { token, ttl, .. } = request {
            if answer == Answer::Replied(Reply::Behind) {
                // Nothing set anywhere: it waits its turn.
                c.wait(state.now);
                return;
            }
            if answer == Answer::Quarantined {
                return;
            }
            // Granted, or "held" to the first in line: the others too.
            let request = Request::Acquire {
                slot: 0,
                token,
                ttl,
                fence: None,
            };
            self.send_from(state, client, 1, request);
        }
        self.settle(state, client, false);
    }

    /// Whether some live client holds within [`RECOVERY_STEPS`] of a
    /// fault-free continuation of `state`: every message delivered in
    /// order, a round whose messages are all gone given up (its node
    /// timeout), a lapsed holder's release, every due retry and start
    /// made, and time passing only when nothing else is left to do.
    fn recovers(&self, state: &State) -> bool {
        self.stuck(state).is_none()
    }

    /// Where the fault-free continuation of `state` (see
    /// [`QUEUE_MOVES`]) stands after [`RECOVERY_STEPS`] steps without any
    /// live client holding; `None` when one came to hold.
    pub fn stuck(&self, state: &State) -> Option<State> {
        let mut s = state.clone();
        for _ in 0..RECOVERY_STEPS {
            let live = s.clients.iter().any(|c| c.phase != Phase::Crashed);
            if !live || !self.valid_holders(&s).is_empty() {
                return None;
            }
            let action = self.fault_free(&s);
            s = self
                .next_state(&s, action)
                .expect("a fault-free step applies");
        }
        Some(s)
    }

    /// The next step of a fault-free continuation (see [`recovers`]).
    fn fault_free(&self, s: &State) -> Action {
        if let Some(m) = s.net.first() {
            return Action::Deliver(*m);
        }
        for (i, c) in s.clients.iter().enumerate() {
            let client = i as u8;
            match c.phase {
                Phase::Acquiring { .. } => return Action::GiveUp(client),
                Phase::Holding { .. } => return Action::Release(client),
                Phase::Waiting { .. } if self.may_retry(s, c) => return Action::Retry(client),
                Phase::Idle => {
                    return Action::Start {
                        client,
                        slot: self.slots(client)[0],
                    };
                }
                _ => {}
            }
        }
        Action::Tick
    }

    /// Whether a waiting client asks again now: woken, or its timer due.
    fn may_retry(&self, s: &State, c: &Client) -> bool {
        let Phase::Waiting { since, woken } = c.phase else {
            return false;
        };
        let timer = self.config.mutation != Some(Mutation::WaitWithoutTimer);
        woken || (timer && s.now >= since + self.config.refresh)
    }
}

impl Model for Redlock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let empty = State {
            now: 0,
            nodes: vec![Node::new(self.config.node_alive()); self.config.nodes],
            clients: vec![Client::new(); self.config.clients],
            net: Vec::new(),
            losses: 0,
            restarts: 0,
            jumps: 0,
            crashes: 0,
            gated: self.config.queued(),
            max_fence: None,
            fence_regressed: false,
        };
        if !self.config.queued() {
            return vec![empty];
        }
        // And one where a waiter that crashed is the queue's head.
        let mut ghost = empty.clone();
        ghost.nodes[0].queue_first(GHOST, self.config.node_alive());
        vec![empty, ghost]
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
                Phase::Waiting { .. } if c.attempts < cfg.attempts && self.may_retry(state, c) => {
                    actions.push(Action::Retry(client));
                }
                Phase::Idle | Phase::Waiting { .. } | Phase::Crashed => {}
            }
            if state.crashes < cfg.crashes && c.phase != Phase::Crashed {
                actions.push(Action::Crash(client));
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
                Request::Release { .. }
                    | Request::ReadRelease { .. }
                    | Request::GateRelease { .. }
                    | Request::Leave { .. }
                    | Request::Wake
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
            Action::Start { client, slot } => self.start_round(&mut state, client, slot),
            Action::Retry(client) => self.start_round(&mut state, client, 0),
            Action::Crash(client) => {
                state.clients[usize::from(client)].phase = Phase::Crashed;
                state.crashes += 1;
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
                self.release(&mut state, client, slot, token, true);
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
                    Kind::Lock | Kind::FencedLock | Kind::QueuedLock => holders.len() <= 1,
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
            Property::always(QUEUE_MOVES, |m: &Redlock, s: &State| {
                !m.config.queued() || m.recovers(s)
            }),
            Property::sometimes(SOMEONE_HOLDS, |m: &Redlock, s: &State| {
                !m.valid_holders(s).is_empty()
            }),
        ]
    }
}
