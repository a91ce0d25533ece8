// Command idle reports the CPU a worker uses while it waits with nothing to
// do (Worker.Run, sleeping on its event fd): the idle-CPU check of make bench.
//
//	idle [-for 5s]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/ucxgo/ucx/ucp"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	d := flag.Duration("for", 5*time.Second, "how long the worker waits")
	flag.Parse()
	ctx, err := ucp.NewContext()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
	defer ctx.Close()
	w, err := ctx.NewWorker()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
	defer w.Close()
	run, cancel := context.WithTimeout(context.Background(), *d)
	defer cancel()
	before, start := cpu(), time.Now()
	w.Run(run)
	used, wall := cpu()-before, time.Since(start)
	fmt.Printf("idle worker for %v: CPU %v (%.2f%% of one core), %d guard ticks\n",
		wall.Round(time.Millisecond), used.Round(time.Microsecond), 100*used.Seconds()/wall.Seconds(), w.Stats().TickWakeups)
}
