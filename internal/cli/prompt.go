package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/sparkles-dev/sparkles/client"
	"github.com/sparkles-dev/sparkles/sandbox"
)

// Exit statuses of sparkles prompt, besides 0 for a turn that succeeded.
const (
	exitTurnFailed   exitCode = 1
	exitTurnCanceled exitCode = 2
	// exitDenied is a turn that succeeded without something it asked for:
	// a script that denies learns that the work may be incomplete.
	exitDenied      exitCode = 3
	exitInterrupted exitCode = 130
)

func newPromptCommand() *cli.Command {
	return &cli.Command{
		Name:      "prompt",
		Usage:     "run a turn and show what the agent does as it happens",
		ArgsUsage: "TEXT",
		Description: "Creates a sandbox unless --sandbox names one (its id goes to stderr), starts a turn with TEXT\n" +
			"and follows it to the end. Ctrl-C cancels the turn; a second Ctrl-C quits at once.\n" +
			"A sandbox it creates is named after the prompt's first words (metadata name, shown by\n" +
			"`sparkles sandbox list`) and keeps its agent running until the server's idle timeout; --rm\n" +
			"deletes it once the turn ends, else the summary says how to continue or delete it.\n" +
			"Without --approve-all or --deny-all, requests of the agent are asked on the terminal, and denied\n" +
			"when stdin is not a terminal: y allows this once, a takes the agent's always-option when it offers\n" +
			"one (the agent may then stop asking), anything else denies.\n" +
			"Exit status: 0 when the turn succeeded, 1 when it failed, 2 when it was canceled, 3 when it\n" +
			"succeeded but a request of the agent was denied, 64 when the command line is wrong.\n\n" +
			demoWordsHelp(),
		Flags: append(clientFlags(
			&cli.StringFlag{Name: "sandbox", EnvVars: []string{"SPARKLES_SANDBOX"}, Usage: "run the turn in this sandbox instead of a new one"},
			&cli.StringFlag{Name: "agent", EnvVars: []string{"SPARKLES_SANDBOX_AGENT"}, Usage: "agent of the new sandbox (default: the server's default agent)"},
			&cli.BoolFlag{Name: "hide-reasoning", EnvVars: []string{"SPARKLES_HIDE_REASONING"}, Usage: "do not show the agent's reasoning"},
			&cli.BoolFlag{Name: "approve-all", EnvVars: []string{"SPARKLES_APPROVE_ALL"}, Usage: "approve every request of the agent without asking, each for one use (its allow_once option)"},
			&cli.BoolFlag{Name: "deny-all", EnvVars: []string{"SPARKLES_DENY_ALL"}, Usage: "deny every request of the agent without asking"},
			&cli.BoolFlag{Name: "rm", EnvVars: []string{"SPARKLES_RM"}, Usage: "delete the sandbox this command creates once the turn ends (not one named with --sandbox)"},
			toolOutputFlag(),
			&cli.BoolFlag{Name: "queue", EnvVars: []string{"SPARKLES_QUEUE"}, Usage: "while another turn of the sandbox runs, wait behind it instead of failing (at most 16 wait)"},
		), attachFlags()...),
		Action: runPrompt,
	}
}

func runPrompt(c *cli.Context) error {
	args, err := positional(c, 1, -1)
	if err != nil {
		return err
	}
	text := strings.Join(args, " ")
	if strings.TrimSpace(text) == "" {
		return usagef("the prompt is empty; say what the agent should do: sparkles prompt TEXT")
	}
	blocks, err := attachBlocks(c, text)
	if err != nil {
		return err
	}
	if c.Bool("rm") && c.String("sandbox") != "" {
		return usagef("--rm deletes only the sandbox this command creates, not one named with --sandbox; "+
			"delete that one with: sparkles sandbox delete %s", c.String("sandbox"))
	}
	stdinTTY := term.IsTerminal(int(os.Stdin.Fd()))
	policy := policyNone
	switch {
	case c.Bool("approve-all") && c.Bool("deny-all"):
		return usagef("--approve-all and --deny-all contradict each other; pass one of them")
	case c.Bool("approve-all"):
		policy = policyApprove
	case c.Bool("deny-all"):
		policy = policyDeny
	case stdinTTY:
		policy = policyAsk
	}
	api, err := newAPIClient(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()

	id := c.String("sandbox")
	next := ""
	var since uint64
	if id == "" {
		sb, err := api.CreateSandbox(ctx, client.CreateSandboxRequest{
			Agent:      c.String("agent"),
			Metadata:   map[string]string{"name": sandboxName(text)},
			ToolOutput: c.Bool("tool-output"),
		})
		if err != nil {
			return api.describe(err)
		}
		fmt.Fprintf(c.App.ErrWriter, "sandbox %s\n", sb.ID)
		id, since = sb.ID, uint64(sb.LastEventID)
		if c.Bool("rm") {
			// Whatever ends the command (the turn, an error, a second
			// Ctrl-C) the sandbox goes with it.
			defer removeSandbox(api, c.App.ErrWriter, id, deleteCommand(c, id))
		} else {
			next = continueCommand(c, id) + " · delete: " + deleteCommand(c, id)
		}
	} else {
		sb, err := api.GetSandbox(ctx, id)
		if err != nil {
			return api.describe(err)
		}
		since = uint64(sb.LastEventID)
		next = continueCommand(c, id)
	}

	// From here a Ctrl-C cancels the turn instead of killing the process.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	started := time.Now()
	start := api.StartTurn
	if c.Bool("queue") {
		start = api.QueueTurn
	}
	var turn sandbox.Turn
	if blocks != nil {
		turn, err = api.StartTurnInput(ctx, id, blocks, c.Bool("queue"))
	} else {
		turn, err = start(ctx, id, text)
	}
	if err != nil {
		return api.describe(err)
	}

	p := &promptRun{
		api: api, id: id, turn: turn, policy: policy, errw: c.App.ErrWriter, stdin: os.Stdin,
		r:         newRenderer(c.App.Writer, c.App.ErrWriter, c.Bool("hide-reasoning")),
		decided:   map[string]bool{},
		approvals: map[string]*sandbox.ApprovalRequested{},
		next:      next,
		started:   started,
		created:   c.String("sandbox") == "",
	}
	// The stream starts at the sandbox's position before the turn, so it
	// sees every event of the turn whenever it connects.
	retry := make(chan error, 1)
	s := api.Stream(ctx, id, client.StreamOptions{
		Since: client.Since(since),
		OnRetry: func(err error, _ time.Duration) {
			select {
			case retry <- err:
			default:
			}
		},
	})
	defer s.Close()
	msgs, errc := make(chan client.Message), make(chan error, 1)
	go func() {
		for {
			m, err := s.Next(ctx)
			if err != nil {
				errc <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p.loop(msgs, errc, retry, sigs)
}

type approvalPolicy int

const (
	policyNone    approvalPolicy = iota // no flag, no terminal: deny and say so
	policyAsk                           // ask on the terminal
	policyApprove                       // --approve-all
	policyDeny                          // --deny-all
)

// promptRun follows one turn: it renders its events and answers its
// approvals until the turn completes.
type promptRun struct {
	api    *apiClient
	id     string
	turn   sandbox.Turn
	policy approvalPolicy
	r      *renderer
	errw   io.Writer
	stdin  io.Reader

	queue     []*sandbox.ApprovalRequested // waiting to be asked
	asking    *sandbox.ApprovalRequested
	answers   chan string
	decided   map[string]bool                       // approvals this run answered
	approvals map[string]*sandbox.ApprovalRequested // every approval of the turn
	next      string                                // how to go on with the sandbox; "" when it is deleted
	created   bool                                  // this command created the sandbox
	denied    int                                   // approvals of the turn that ended denied
	started   time.Time                             // when the turn was asked for
	canceling bool
	down      bool // the stream is reconnecting
	prompting bool // a question waits on the terminal, mid-line
}

func (p *promptRun) loop(msgs <-chan client.Message, errc <-chan error, retry <-chan error, sigs <-chan os.Signal) error {
	var tick <-chan time.Time
	if p.r.fancy {
		t := time.NewTicker(spinEvery)
		defer t.Stop()
		tick = t.C
		p.r.status.start = p.started
		p.r.setWaiting("waiting for the agent…")
	}
	for {
		select {
		case <-tick:
			p.r.tick()
		case m := <-msgs:
			if p.down {
				p.down = false
				p.notice("reconnected")
			}
			if done, err := p.handle(m); done {
				p.pipeNext()
				return err
			}
		case err := <-errc:
			p.r.finish()
			return p.api.describe(err)
		case err := <-retry:
			if !p.down {
				p.down = true
				p.notice(fmt.Sprintf("lost the stream (%s); reconnecting to %s", reason(err), p.api.url))
			}
		case <-sigs:
			if p.canceling {
				p.r.finish()
				return exitInterrupted
			}
			p.canceling, p.r.canceling = true, true
			p.notice("canceling the turn (Ctrl-C again to quit now)")
			p.r.setWaiting("canceling the turn…")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := p.api.CancelTurn(ctx, p.id, p.turn.ID)
			cancel()
			if err != nil {
				p.notice("could not cancel the turn: " + p.api.describe(err).Error())
			}
		case line, ok := <-p.answers:
			p.answer(line, ok)
		}
	}
}

// handle renders one message; done is true once the turn has ended, with
// the error that gives the exit status.
func (p *promptRun) handle(m client.Message) (done bool, err error) {
	switch m.Kind {
	case client.KindGap:
		p.notice(fmt.Sprintf("events %d to %d were pruned before they could be shown", m.Gap.From, m.Gap.To))
		return false, nil
	case client.KindStatus:
		if d, ok := m.Event.Data.(*sandbox.SandboxStatus); ok {
			switch d.Status {
			case sandbox.StatusFailed, sandbox.StatusStopped, sandbox.StatusDeleted:
				p.notice("sandbox " + d.Status + detail(d.Detail))
			}
		}
		return false, nil
	case client.KindEvent:
	default:
		return false, nil
	}
	ev := m.Event
	if ev.TurnID != "" && ev.TurnID != p.turn.ID {
		return false, nil
	}
	if ev.TurnID != "" && !p.canceling {
		p.r.setWaiting("working…")
	}
	switch d := ev.Data.(type) {
	case *sandbox.MessageUpdated:
		p.r.part(d)
	case *sandbox.MessageCompleted:
		p.r.completed(d)
	case *sandbox.ToolUpdated:
		p.r.tool(d)
	case *sandbox.PlanUpdated:
		p.r.info(planLine(d, 160))
	case *sandbox.ToolOutput:
		// Once, when its command ended: the output grows until then.
		if d.ExitCode != nil {
			p.r.info(outputLine(d, 160))
		}
	case *sandbox.ApprovalRequested:
		p.r.flush()
		p.approval(d)
	case *sandbox.ApprovalResolved:
		p.r.flush()
		p.resolved(d)
	case *sandbox.SandboxError:
		p.notice("error: " + d.Message)
	case *sandbox.TurnCompleted:
		p.r.finish()
		if p.r.tty {
			p.r.turnSummary(d, p.denied, p.next)
			return true, turnExit(d, p.denied)
		}
		if changed := changesLine(d.Changes, p.r.style); changed != "" {
			p.r.info(changed)
		}
		switch d.Status {
		case sandbox.TurnSucceeded:
			if p.denied > 0 {
				p.notice("turn " + denialWords(p.denied))
				return true, exitDenied
			}
			return true, nil
		case sandbox.TurnCanceled:
			p.notice("turn canceled" + canceledWhy(d))
			return true, exitTurnCanceled
		}
		msg := "turn failed (" + d.StopReason + ")"
		if d.Error != nil {
			msg = "turn failed: " + d.Error.Message
		}
		p.notice(msg)
		return true, exitTurnFailed
	}
	return false, nil
}

// pipeNext tells a pipe's reader how to go on with the sandbox a turn
// left running; a terminal reads it in the summary.
func (p *promptRun) pipeNext() {
	if !p.r.tty && p.created && p.next != "" {
		p.notice("continue: " + p.next)
	}
}

// turnExit is the exit status of a turn that ended so.
func turnExit(d *sandbox.TurnCompleted, denied int) error {
	switch {
	case d.Status == sandbox.TurnSucceeded && denied > 0:
		return exitDenied
	case d.Status == sandbox.TurnSucceeded:
		return nil
	case d.Status == sandbox.TurnCanceled:
		return exitTurnCanceled
	}
	return exitTurnFailed
}

func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func (p *promptRun) notice(s string) {
	if p.prompting {
		// The question's line ends here; it stays asked.
		fmt.Fprintln(p.errw)
		p.prompting = false
	}
	p.r.notice("sparkles: " + sanitize(s, false))
}

func (p *promptRun) approval(a *sandbox.ApprovalRequested) {
	p.approvals[a.ApprovalID] = a
	switch p.policy {
	case policyApprove:
		p.decide(a, client.Approve, "approved (--approve-all)")
	case policyDeny:
		p.decide(a, client.Deny, "denied (--deny-all)")
	case policyAsk:
		p.queue = append(p.queue, a)
		p.askNext()
	default:
		p.decide(a, client.Deny, "denied: there is no terminal to ask on; pass --approve-all to allow such requests")
	}
}

func (p *promptRun) askNext() {
	if p.asking != nil || len(p.queue) == 0 {
		return
	}
	p.asking, p.queue = p.queue[0], p.queue[1:]
	if p.answers == nil {
		p.answers = make(chan string)
		go readLines(p.stdin, p.answers)
	}
	p.r.ask(question(p.asking))
	p.prompting = true
}

// question is what the terminal asks about an approval. Its text, the
// agent's labels included, is sanitized like everything else of the agent's.
func question(a *sandbox.ApprovalRequested) string {
	q := "Allow " + describeApproval(a) + "? "
	always := alwaysOption(a)
	if always == nil {
		return sanitize(q+"[y/N] ", false)
	}
	choice := "[a]lways"
	if always.Kind == sandbox.OptionRejectAlways {
		choice = "[a]lways deny"
	}
	if always.Label != "" {
		choice += " (" + oneLine(always.Label, 60) + ")"
	}
	// "yes once" is offered only when there is a once to grant: a plain
	// approve of an agent without allow_once takes its allow_always.
	once := ""
	if offers(a, sandbox.OptionAllowOnce) {
		once = "[y]es once / "
	}
	return sanitize(q+once+choice+" / [N]o ", false)
}

// answerDecision is the decision a line typed at the question sends, and
// how to report it. Whatever is not a yes or an always is a no.
func answerDecision(a *sandbox.ApprovalRequested, line string) (client.Decision, string) {
	always := alwaysOption(a)
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		if always == nil {
			return client.Approve, "approved"
		}
		if offers(a, sandbox.OptionAllowOnce) {
			return client.Approve, "approved once"
		}
	case "a", "always":
		if always != nil {
			outcome := "always allowed"
			if always.Kind == sandbox.OptionRejectAlways {
				outcome = "always denied"
			}
			if always.Label != "" {
				outcome += " (" + oneLine(always.Label, 60) + ")"
			}
			return client.Decision{OptionID: always.OptionID}, outcome
		}
	}
	return client.Deny, "denied"
}

// alwaysOption is the lasting option an approval offers, its allow_always
// before its reject_always, or nil.
func alwaysOption(a *sandbox.ApprovalRequested) *sandbox.Option {
	for _, kind := range []string{sandbox.OptionAllowAlways, sandbox.OptionRejectAlways} {
		for i := range a.Options {
			if a.Options[i].Kind == kind {
				return &a.Options[i]
			}
		}
	}
	return nil
}

func offers(a *sandbox.ApprovalRequested, kind string) bool {
	for _, o := range a.Options {
		if o.Kind == kind {
			return true
		}
	}
	return false
}

// readLines sends each line of r, and closes lines at its end.
func readLines(r io.Reader, lines chan<- string) {
	defer close(lines)
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		lines <- line
	}
}

func (p *promptRun) answer(line string, ok bool) {
	// The Enter that sent the line ended the question's line too.
	p.prompting = false
	if !ok {
		// stdin ended: nobody is left to ask.
		p.answers = nil
		p.policy = policyNone
		fmt.Fprintln(p.errw)
	}
	p.r.answered()
	a := p.asking
	if a == nil {
		return // an answer to a question that was settled meanwhile
	}
	p.asking = nil
	d, outcome := answerDecision(a, line)
	p.decide(a, d, outcome)
	if !ok {
		for _, q := range p.queue {
			p.approval(q)
		}
		p.queue = nil
	}
	p.askNext()
}

func (p *promptRun) decide(a *sandbox.ApprovalRequested, d client.Decision, outcome string) {
	p.decided[a.ApprovalID] = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.api.Decide(ctx, p.id, a.ApprovalID, d)
	switch {
	case client.IsType(err, sandbox.EApprovalResolved):
		p.notice(describeApproval(a) + ": already resolved")
	case err != nil:
		p.notice("could not answer " + describeApproval(a) + ": " + p.api.describe(err).Error())
	default:
		p.r.info(describeApproval(a) + ": " + outcome)
	}
}

func (p *promptRun) resolved(d *sandbox.ApprovalResolved) {
	a := p.approvals[d.ApprovalID]
	if d.Decision == sandbox.DecisionDenied {
		p.denied++
		if a != nil {
			p.r.deny(a)
		}
	}
	// Settled by the turn's cancel: what the person sees is that the tool
	// was canceled (the agent may then report it failed).
	canceled := a != nil && d.Decision == sandbox.DecisionCanceled && d.Reason == sandbox.ReasonTurnCanceled
	if p.asking != nil && p.asking.ApprovalID == d.ApprovalID {
		// Settled elsewhere (a timeout, a cancel, another client) while the
		// question was on screen; the next answer typed will be ignored.
		if canceled {
			if p.prompting {
				fmt.Fprintln(p.errw)
				p.prompting = false
			}
			p.r.answered()
			p.r.toolCanceled(a)
		} else {
			p.notice(describeApproval(p.asking) + ": " + d.Decision + " (" + d.Reason + ")")
			p.r.answered()
		}
		p.asking = nil
		p.askNext()
		return
	}
	if canceled {
		p.r.toolCanceled(a)
	}
	for i, q := range p.queue {
		if q.ApprovalID == d.ApprovalID {
			p.queue = append(p.queue[:i:i], p.queue[i+1:]...)
			break
		}
	}
	if !p.decided[d.ApprovalID] && !canceled {
		p.r.info("approval " + d.ApprovalID + ": " + d.Decision + " (" + d.Reason + ")")
	}
}

func describeApproval(a *sandbox.ApprovalRequested) string {
	return "[" + a.Kind + "] " + oneLine(a.Title, 100)
}

// toolOutputFlag creates the sandbox with the output of its agent's
// commands in its log (tool.output).
func toolOutputFlag() cli.Flag {
	return &cli.BoolFlag{Name: "tool-output", EnvVars: []string{"SPARKLES_TOOL_OUTPUT"},
		Usage: "keep what the agent's commands print in the log (tool.output), redacted of the sandbox's secrets only; for a sandbox this command creates"}
}
