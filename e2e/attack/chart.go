package attack

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Chart renders direct vs gated attack success per family (every policy
// pooled) to path; the format follows its extension (.svg, .png).
func (rep *Report) Chart(path string) error {
	var names []string
	var direct, gated plotter.Values
	for _, f := range Families {
		d := rep.cell(func(r *Run) bool { return r.Mode == "direct" && r.Scenario.Family == f.Name })
		g := rep.cell(func(r *Run) bool { return r.Mode == "gated" && r.Scenario.Family == f.Name })
		if d.Attacks == 0 && g.Attacks == 0 {
			continue
		}
		label := f.Name
		if !f.Claimed {
			label += "*"
		}
		names = append(names, label)
		direct = append(direct, 100*Rate(d.Successes, d.Attacks))
		gated = append(gated, 100*Rate(g.Successes, g.Attacks))
	}
	p := plot.New()
	p.Title.Text = "Attack success per family, scripted agents (* not claimed by Countersign)"
	p.Y.Label.Text = "attack success (%)"
	p.Y.Min, p.Y.Max = 0, 100
	w := vg.Points(9)
	bd, err := plotter.NewBarChart(direct, w)
	if err != nil {
		return err
	}
	bd.Color, bd.LineStyle.Width, bd.Offset = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, 0, -w/2
	bg, err := plotter.NewBarChart(gated, w)
	if err != nil {
		return err
	}
	bg.Color, bg.LineStyle.Width, bg.Offset = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, 0, w/2
	p.Add(bd, bg, plotter.NewGrid())
	p.Legend.Add("direct (agent holds the rail key)", bd)
	p.Legend.Add("gated (through Countersign)", bg)
	p.Legend.Top = true
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.6
	p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = -0.9, -0.5
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}
