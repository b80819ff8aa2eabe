package fit

import (
	"errors"
	"fmt"
	"math"

	"github.com/llm-testbed/testbed/harness/analysis"
)

// linearFit is an ordinary least-squares fit y ≈ X·coef.
type linearFit struct {
	Coef   []float64 // one per column of X
	StdErr []float64 // standard error of each coefficient
	R2     float64   // coefficient of determination
	RMSE   float64   // root mean square of the residuals
	N      int       // rows fitted
	Resid  []float64 // y − X·coef, per row
}

// errSingular means the columns of X are linearly dependent: the data cannot
// tell the coefficients apart (e.g. every step had the same batch size).
var errSingular = errors.New("the data cannot separate the terms (singular normal equations)")

// leastSquares solves the normal equations XᵀX·c = Xᵀy by Gaussian
// elimination with partial pivoting. Columns are scaled to unit size first,
// so µs and token counts of very different magnitudes stay well conditioned.
func leastSquares(X [][]float64, y []float64) (linearFit, error) {
	n := len(y)
	if n == 0 || len(X) != n {
		return linearFit{}, fmt.Errorf("least squares: %d rows, %d targets", len(X), n)
	}
	k := len(X[0])
	if n <= k {
		return linearFit{}, fmt.Errorf("least squares: %d rows for %d coefficients", n, k)
	}
	scale := make([]float64, k)
	for _, row := range X {
		for j, v := range row {
			scale[j] = math.Max(scale[j], math.Abs(v))
		}
	}
	for j := range scale {
		if scale[j] == 0 {
			return linearFit{}, fmt.Errorf("least squares: term %d is zero in every row: %w", j, errSingular)
		}
	}
	// A = XᵀX (scaled), b = Xᵀy.
	A := make([][]float64, k)
	for i := range A {
		A[i] = make([]float64, k)
	}
	b := make([]float64, k)
	for r, row := range X {
		for i := 0; i < k; i++ {
			xi := row[i] / scale[i]
			b[i] += xi * y[r]
			for j := 0; j < k; j++ {
				A[i][j] += xi * row[j] / scale[j]
			}
		}
	}
	inv, err := invert(A)
	if err != nil {
		return linearFit{}, err
	}
	coef := make([]float64, k)
	for i := 0; i < k; i++ {
		for j := 0; j < k; j++ {
			coef[i] += inv[i][j] * b[j]
		}
	}
	f := linearFit{Coef: make([]float64, k), StdErr: make([]float64, k), N: n, Resid: make([]float64, n)}
	var mean, ssRes, ssTot float64
	for _, v := range y {
		mean += v
	}
	mean /= float64(n)
	for r, row := range X {
		pred := 0.0
		for j, v := range row {
			pred += v / scale[j] * coef[j]
		}
		f.Resid[r] = y[r] - pred
		ssRes += f.Resid[r] * f.Resid[r]
		ssTot += (y[r] - mean) * (y[r] - mean)
	}
	sigma2 := ssRes / float64(n-k)
	for j := 0; j < k; j++ {
		f.Coef[j] = coef[j] / scale[j]
		f.StdErr[j] = math.Sqrt(math.Max(sigma2*inv[j][j], 0)) / scale[j]
	}
	f.RMSE = math.Sqrt(ssRes / float64(n))
	if ssTot > 0 {
		f.R2 = 1 - ssRes/ssTot
	}
	return f, nil
}

// invert returns the inverse of the square matrix A (Gauss-Jordan with
// partial pivoting), or errSingular.
func invert(A [][]float64) ([][]float64, error) {
	k := len(A)
	m := make([][]float64, k)
	for i := range m {
		m[i] = make([]float64, 2*k)
		copy(m[i], A[i])
		m[i][k+i] = 1
	}
	for c := 0; c < k; c++ {
		p := c
		for r := c + 1; r < k; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		if math.Abs(m[p][c]) < 1e-12 {
			return nil, errSingular
		}
		m[c], m[p] = m[p], m[c]
		pv := m[c][c]
		for j := range m[c] {
			m[c][j] /= pv
		}
		for r := 0; r < k; r++ {
			if r == c || m[r][c] == 0 {
				continue
			}
			f := m[r][c]
			for j := range m[r] {
				m[r][j] -= f * m[c][j]
			}
		}
	}
	out := make([][]float64, k)
	for i := range out {
		out[i] = m[i][k:]
	}
	return out, nil
}

// robustSigma is 1.4826 × the median absolute deviation: the standard
// deviation of normal data, unmoved by a few wild values.
func robustSigma(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	med := analysis.Quantile(c, 0.5)
	for i := range c {
		c[i] = math.Abs(c[i] - med)
	}
	return 1.4826 * analysis.Quantile(c, 0.5)
}
